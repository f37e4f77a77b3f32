"""The container side: what runs in each rank's container (or on the host under LAYOUT=host).
The launcher (`launch.py`: the image's entrypoint, from the PyTorchJob environment to
`accelerate launch`), the SFT trainer (`sft_trainer.py`) and its parts (`sft/`), the rank
recorder and what is mounted beside it in a foreign image (`rank/`), the bench's probe
(`probe.py`), the demo's model and data (`tiny_model.py`, `demo_data.py`), and what the trainer,
the probe and the harness share (`shared/`). It imports torch; it never imports the host side.
"""
