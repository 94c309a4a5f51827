"""csa2_train: the DeepSeek-V4.1 (CSA2) architecture in PyTorch, for training the csa2-serve models.

model.py   the network, with the official state_dict names and the served (bf16 + fake-quantized) numerics
quant.py   the KV-side fake quantizers (FP8 window KV, FP4 main KV, MXFP4 index K/Q), with straight-through gradients
config.py  ModelArgs (the official config.json keys)
"""
