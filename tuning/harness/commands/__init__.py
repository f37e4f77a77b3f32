"""The subcommands, one module (or family folder) each: up, down/ps/logs (housekeeping),
image, stacks, bench, fault, kube, examples; `gpus` lives in spec/devices.py."""
