"""Container side: the SFT trainer (tuning.sft_trainer) and its helpers.

tuning.harness is the host side and never imports torch.
"""
