"""From an env's image to the network's frames: grey (or colour), cropped, resized by area, and the last C stacked.

`FramePreparer(cfg)(image) -> (H, W) uint8` (or (3, H, W)): an RGB (h, w, 3) or grey (h, w) / (h, w, 1) image, cut by `frame_crop`
(top, bottom, left, right), made grey (OpenCV's RGB2GRAY: 0.299 R + 0.587 G + 0.114 B) and resized to
W_downsized x H_downsized with area interpolation (the mean of the pixels each output pixel covers). With
`frame_colour`: an RGB image kept in colour, (3, H, W), its R, G, B channels each resized the same way.

The last C frames of a race are stacked by games/frame_history.py.
"""

from __future__ import annotations

import cv2
import numpy as np

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.config.schema import ConfigError


def describe_preprocessing(cfg) -> str:
    crop = "" if cfg.frame_crop is None else f" cut by (top, bottom, left, right) = {tuple(cfg.frame_crop)} pixels,"
    if cfg.frame_colour:
        colour = "in colour (its R, G, B channels, in that order)"
    else:
        colour = "in grey (OpenCV COLOR_RGB2GRAY: 0.299 R + 0.587 G + 0.114 B, rounded; a grey image as it is)"
    return (
        f"The env's image ({cfg.gymnasium_env_id}'s observation),{crop} {colour}, resized to {cfg.W_downsized} x "
        f"{cfg.H_downsized} by OpenCV INTER_AREA, uint8; the last {cfg.frame_stack} such frames stacked as channels, oldest "
        f"first, shape {frame_shape(cfg)}; an episode's first frame stands for the frames "
        "before it. No other scaling: the network maps the bytes to [-1, 1) itself."
    )


class FramePreparer:
    def __init__(self, cfg):
        self.size = (int(cfg.W_downsized), int(cfg.H_downsized))
        self.crop = tuple(cfg.frame_crop) if cfg.frame_crop is not None else (0, 0, 0, 0)
        self.colour = bool(cfg.frame_colour)

    def check(self, image_shape: tuple, env_id: str) -> None:
        """ConfigError when the env's observation is not an image this can prepare."""
        shape = tuple(image_shape)
        if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] not in (1, 3)):
            raise ConfigError(
                f"setting `gymnasium_env_id` = {env_id!r}: its observation of shape {shape} is not an image "
                "((h, w, 3) RGB or (h, w) grey uint8)"
            )
        if self.colour and (len(shape) != 3 or shape[2] != 3):
            raise ConfigError(f"setting `frame_colour` = True: {env_id}'s observation of shape {shape} is grey, not RGB")
        top, bottom, left, right = self.crop
        if top + bottom >= shape[0] or left + right >= shape[1]:
            raise ConfigError(f"setting `frame_crop` = {self.crop} leaves nothing of {env_id}'s {shape[1]} x {shape[0]} image")

    def __call__(self, image: np.ndarray) -> np.ndarray:
        top, bottom, left, right = self.crop
        image = image[top : image.shape[0] - bottom, left : image.shape[1] - right]
        if self.colour:
            resized = cv2.resize(np.ascontiguousarray(image, dtype=np.uint8), self.size, interpolation=cv2.INTER_AREA)
            return np.ascontiguousarray(resized.transpose(2, 0, 1))
        if image.ndim == 3 and image.shape[2] == 3:
            image = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
        elif image.ndim == 3:
            image = image[:, :, 0]
        return cv2.resize(np.ascontiguousarray(image, dtype=np.uint8), self.size, interpolation=cv2.INTER_AREA)
