"""A run's spec: flags typed once, the layout model, the GPU plan, the trainer presets and
the checks made before anything starts. Imports only errors, run_files and machine."""
