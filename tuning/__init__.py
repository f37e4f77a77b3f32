"""Two sides: `tuning.container` runs in the ranks' containers (it imports torch);
`tuning.harness` is the host side and never imports torch. `tuning.sft_trainer` and
`tuning.launch` keep fms's entry names: fms's jobs and the images call them.
"""
