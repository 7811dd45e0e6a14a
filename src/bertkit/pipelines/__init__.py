"""End-to-end recipes (pretrain, fine-tune, the demo) built from the library parts."""
