"""What the trainer, the bench's probe and the harness share: CPU affinity, the boot clock,
the transport a rank sees."""
