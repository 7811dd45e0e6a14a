"""Test helper: weights far from their initialisation, for parity tests."""

import torch


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights far from their initial values, so zero biases or unit gains cannot hide a mix-up (and logits far
    enough apart that greedy choices are not near-ties); returns the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = name.endswith("weight") and p.dim() == 1                      # a LayerNorm's
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + gain)
    return model.eval()
