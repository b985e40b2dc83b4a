"""`horovod.common` on ml_comm: the helpers Horovod scripts import from it."""
