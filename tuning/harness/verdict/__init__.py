"""The verdict across ranks: who the culprit is and why. `facts` gathers what each rank showed
(a live run's stacks, flight recorders, metrics and exits; or a cluster's logs, make repro),
`rules` judges it, `desync` and `torch_check` are its rules for collectives run unlike
(its own reading, and torch's), `words` its way of saying ranks, `record` its type and its
JSON, `live` the verdict of a run the harness drives. It never reads what a fault injected."""
