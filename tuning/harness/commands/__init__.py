"""The subcommands, one module (or a family of modules) each: up, down/ps/logs (housekeeping),
image, stacks, bench, fault (its kinds in faults/kinds/), soak, pool, kube, examples; gpus."""
