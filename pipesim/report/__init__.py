"""The report layer: metrics, traces, plots, tables, the HTML page and the explanation of a step."""
