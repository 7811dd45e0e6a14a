"""Pictures where people would rather look than read: figures (positional encodings, attention heatmaps, loss and
label curves), the attention viewer page, where an image model looks, and `bertkit explain`'s experiments."""
