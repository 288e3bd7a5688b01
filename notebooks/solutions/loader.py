"""Reference answer to the exercise of notebook 03 (the batch loader): the inputs and targets of a batch."""

import numpy as np
import torch


def windows_to_xy(tokens: np.ndarray, starts: np.ndarray, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    windows = np.stack([tokens[s : s + T + 1] for s in starts]).astype(np.int64)  # (B, T + 1)
    x = torch.from_numpy(windows[:, :-1].copy())  # (B, T): the window without its last token
    y = torch.from_numpy(windows[:, 1:].copy())  # (B, T): the same window one token ahead
    return x, y
