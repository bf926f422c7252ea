"""Model FLOPs: architecture shapes, presets, Hugging Face configs and the named MFU conventions."""
