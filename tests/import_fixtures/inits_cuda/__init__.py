"""Initialises CUDA on import."""

import torch

torch.cuda.init()
