"""pipesim: simulate and emulate distributed deep-learning training.

Python API (mirrors the CLI): `load_scenario(path_or_dict, overrides=())`, `simulate(scenario)
-> Report`, `Report.to_dict()`.
"""
__version__ = "0.1.0"


def load_scenario(path_or_dict, overrides=()):
    from pipesim.scenario_load import load_scenario as _load
    return _load(path_or_dict, overrides)


def simulate(scenario, **options):
    """Simulate one training step; `scenario` may be a Scenario, a dict or a path."""
    from pipesim.sim import simulate as _simulate
    from pipesim.calibrate_host import with_host_model
    if not hasattr(scenario, "model"):
        scenario = load_scenario(scenario)
    return _simulate(with_host_model(scenario), **options)
