"""The machine a run takes: its GPUs as nvidia-smi lists them, which are free, the locks that
hold them for a run, and the driver. Imports only errors and spec."""
