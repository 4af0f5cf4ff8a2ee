"""pipesim: simulate and emulate distributed deep-learning training.

Python API (mirrors the CLI): `load_scenario(path_or_dict, overrides=())`, `simulate(scenario)
-> Report`, `Report.to_dict()`.
"""
__version__ = "0.1.0"


def load_scenario(path_or_dict, overrides=()):
    from pipesim.scenario.load import load_scenario as _load
    return _load(path_or_dict, overrides)


def simulate(scenario, **options):
    """Simulate one training step; `scenario` may be a Scenario, a dict or a path."""
    from pipesim.sim import simulate as _simulate
    if not hasattr(scenario, "model"):
        scenario = load_scenario(scenario)
    if scenario.costs.profile is not None:      # only a profile can carry a CPU host model
        from pipesim.calibrate.host import with_host_model
        scenario = with_host_model(scenario)
    return _simulate(scenario, **options)
