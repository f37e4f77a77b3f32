"""The subcommands beyond up/down/ps/logs/image: bench, fault, kube, examples, gpus."""
