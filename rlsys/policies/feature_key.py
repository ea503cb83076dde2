"""Where pooled BLIP-2 image features are cached in `Observation.features` (rlsys/policies/image_features.py computes
them). A module of its own, so that what only reads or writes stored features, such as DigiRL's data files, names the
key without importing PyTorch and transformers."""

FEATURE_KEY = "blip2_pooled"
