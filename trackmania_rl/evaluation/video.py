"""Video of a greedy race (scripts/watch.py): each frame is, side by side,

    | game view (the game's full RGB view) | network input frame (grey or colour, upscaled) | Q-value bars |

all `height` pixels high. The Q panel has one bar per action, scaled between that step's lowest and
highest Q, with the value printed; the chosen action is highlighted, and the panel's header gives the game
time and step (which also keeps consecutive frames distinct: GIF writers merge identical frames).
The game view and its size come from the game's backend description (games/backend.py).
Drawn with numpy and cv2; written as they come (GIF with Pillow, one frame at a time; MP4 through
imageio-ffmpeg).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from trackmania_rl.config.schema import KART_ACTION_FLAGS
from trackmania_rl.games.backend import game_backend

MIN_HEIGHT = 64
MAX_HEIGHT = 2160  # 4K; one RGB frame is about 3.3 height wide: ~10 x height^2 bytes
MIN_Q_PANEL_WIDTH = 160
FORMATS = (".gif", ".mp4")

_FONT = cv2.FONT_HERSHEY_SIMPLEX
_BACKGROUND = (24, 24, 28)
_BAR = (90, 120, 170)
_BAR_CHOSEN = (70, 210, 80)
_ROW_CHOSEN = (45, 70, 45)
_TEXT = (220, 220, 220)
_TEXT_CHOSEN = (255, 255, 255)


def _even(x: float) -> int:
    """x rounded to the nearest even integer >= 2 (H.264 in yuv420p needs even frame sizes)."""
    return max(2, 2 * int(round(x / 2)))


@dataclass(frozen=True)
class PanelLayout:
    height: int
    view_width: int
    network_width: int
    q_width: int

    @property
    def width(self) -> int:
        return self.view_width + self.network_width + self.q_width


def panel_layout(cfg, height: int) -> PanelLayout:
    """Panel sizes of a video frame `height` pixels high (every size even); the game view keeps the
    aspect of the full view of the config's game."""
    if not MIN_HEIGHT <= height <= MAX_HEIGHT:
        raise ValueError(f"video height {height}: must be in [{MIN_HEIGHT}, {MAX_HEIGHT}] pixels")
    height = _even(height)
    view_aspect = game_backend(cfg.game_backend).full_view_aspect(cfg)
    return PanelLayout(
        height=height,
        view_width=_even(height * view_aspect),
        network_width=_even(height * cfg.W_downsized / cfg.H_downsized),
        q_width=_even(max(MIN_Q_PANEL_WIDTH, 0.8 * height)),
    )


def action_labels(cfg) -> list[str]:
    """Short names of the actions: 'gas L', 'brake R', 'gas+brake', 'coast', and SuperTuxKart's kart controls after
    them: 'gas L drift', 'gas nitro', 'rescue'..."""
    labels = []
    for action in cfg.inputs:
        pedals = "+".join(name for name, flag in (("gas", action["accelerate"]), ("brake", action["brake"])) if flag)
        steer = " L" if action["left"] and not action["right"] else " R" if action["right"] and not action["left"] else ""
        steer = " LR" if action["left"] and action["right"] else steer
        kart = " ".join(flag for flag in KART_ACTION_FLAGS if action.get(flag))
        label = (pedals or ("" if kart else "coast")) + steer
        labels.append(f"{label} {kart}".strip() if kart else label)
    return labels


def render_game_view(cfg, game) -> np.ndarray:
    """The full RGB view of `game` (a game instance made for `cfg`), rendered now by its backend's
    `render_full_view`: a render that leaves the race unchanged, so calling it between decisions is safe."""
    return game_backend(cfg.game_backend).render_full_view(game)


def frame_mosaic(stack: np.ndarray) -> np.ndarray:
    """The N frames of a state ((N, H, W) grey, or (N, H, W, 3) colour) tiled row by row, oldest first, in a square grid
    (2 x 2 for 4; one frame as it is): the network panel keeps a frame's aspect."""
    c, height, width = stack.shape[:3]
    side = int(np.ceil(np.sqrt(c)))
    if side == 1:
        return stack[0]
    mosaic = np.zeros((side * height, side * width, *stack.shape[3:]), np.uint8)
    for k, frame in enumerate(stack):
        row, col = divmod(k, side)
        mosaic[row * height : (row + 1) * height, col * width : (col + 1) * width] = frame
    return mosaic


class FrameComposer:
    def __init__(self, cfg, height: int):
        self.layout = panel_layout(cfg, height)
        self.labels = action_labels(cfg)
        self.n_actions = len(cfg.inputs)
        self.colour = bool(cfg.frame_colour)
        self.font_scale = float(np.clip(self.layout.height / 520, 0.28, 0.7))
        self.thickness = 1
        # label column as wide as the longest label, value column as wide as a value like "-123.456"
        q_width = self.layout.q_width
        self._label_w = min(int(0.5 * q_width), max(self._text_size(label)[0] for label in self.labels) + 6)
        self._value_w = min(int(0.3 * q_width), self._text_size("-123.456")[0] + 4)

    def compose(self, view_rgb: np.ndarray, frame: np.ndarray, q_values: np.ndarray, action: int, time_s: float, step: int) -> np.ndarray:
        """One (height, width, 3) uint8 RGB video frame."""
        L = self.layout
        view = cv2.resize(np.ascontiguousarray(view_rgb[..., :3]), (L.view_width, L.height), interpolation=cv2.INTER_AREA)
        height, width = frame.shape[-2:]
        if self.colour:  # (3 x N, H, W): each frame's R, G, B -> N frames (H, W, 3)
            stack = np.asarray(frame).reshape(-1, 3, height, width).transpose(0, 2, 3, 1)
        else:
            stack = np.asarray(frame).reshape(-1, height, width)
        network = cv2.resize(np.ascontiguousarray(frame_mosaic(stack)), (L.network_width, L.height), interpolation=cv2.INTER_NEAREST)
        if not self.colour:
            network = np.repeat(network[:, :, None], 3, axis=2)
        self._label(network, "network input" if len(stack) == 1 else f"network input: {len(stack)} frames, newest last", (4, 4))
        q_panel = self._q_panel(np.asarray(q_values, dtype=np.float64), int(action), time_s, step)
        return np.ascontiguousarray(np.concatenate([view, network, q_panel], axis=1))

    def _text_size(self, text: str) -> tuple[int, int]:
        (w, h), baseline = cv2.getTextSize(text, _FONT, self.font_scale, self.thickness)
        return w, h + baseline

    def _label(self, image: np.ndarray, text: str, top_left: tuple[int, int]) -> None:
        w, h = self._text_size(text)
        x, y = top_left
        cv2.rectangle(image, (x - 2, y - 2), (x + w + 2, y + h + 1), (0, 0, 0), -1)
        cv2.putText(image, text, (x, y + h - 3), _FONT, self.font_scale, (255, 230, 90), self.thickness, cv2.LINE_AA)

    def _q_panel(self, q: np.ndarray, action: int, time_s: float, step: int) -> np.ndarray:
        L = self.layout
        panel = np.empty((L.height, L.q_width, 3), dtype=np.uint8)
        panel[:] = _BACKGROUND
        _, text_h = self._text_size("Qg")
        header_h = text_h + 6
        cv2.putText(panel, f"t {time_s:6.2f} s  #{step}  Q", (4, text_h), _FONT, self.font_scale, _TEXT, self.thickness, cv2.LINE_AA)
        row_h = (L.height - header_h) / max(1, self.n_actions)
        label_w, value_w = self._label_w, self._value_w
        bar_x0, bar_x1 = label_w + 2, L.q_width - value_w - 2
        low, high = float(np.min(q)), float(np.max(q))
        span = high - low
        for i in range(self.n_actions):
            y0 = int(round(header_h + i * row_h))
            y1 = int(round(header_h + (i + 1) * row_h)) - 1
            chosen = i == action
            if chosen:
                cv2.rectangle(panel, (0, y0), (L.q_width - 1, y1), _ROW_CHOSEN, -1)
            fraction = (q[i] - low) / span if span > 0 else 1.0
            length = max(1, int(round(fraction * (bar_x1 - bar_x0))))
            pad = max(0, int(row_h * 0.15))
            cv2.rectangle(panel, (bar_x0, y0 + pad), (bar_x0 + length, max(y0 + pad, y1 - pad)), _BAR_CHOSEN if chosen else _BAR, -1)
            baseline_y = int(round((y0 + y1) / 2 + text_h / 2)) - 2
            color = _TEXT_CHOSEN if chosen else _TEXT
            cv2.putText(panel, self.labels[i], (3, baseline_y), _FONT, self.font_scale, color, self.thickness, cv2.LINE_AA)
            cv2.putText(panel, f"{q[i]:+.3f}", (bar_x1 + 4, baseline_y), _FONT, self.font_scale, color, self.thickness, cv2.LINE_AA)
        return panel


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------
def mp4_available() -> bool:
    return importlib.util.find_spec("imageio_ffmpeg") is not None


def check_output_path(path: str | Path) -> Path:
    """The output path if a video can be written there; ValueError saying why not otherwise."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--out {path}: unknown video format {suffix or '(no extension)'!r}; use a .gif or .mp4 file name")
    if suffix == ".mp4" and not mp4_available():
        raise ValueError(f"--out {path}: writing MP4 needs the imageio-ffmpeg package (pip install imageio-ffmpeg); or write a .gif")
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder: give a file name ending in .gif or .mp4")
    if not path.parent.is_dir():
        raise ValueError(f"--out {path}: folder {path.parent} does not exist")
    return path


class GifStream:
    """An animated GIF written frame by frame: each frame is palettised (256 colours of its own) and
    appended to the file at once, so memory does not grow with the race (Pillow's `save_all` and
    imageio's Pillow writer keep every frame until the end: ~140 MB for a 60 s race). Frame durations are
    rounded so that their sum follows real time (GIF counts in centiseconds)."""

    def __init__(self, path: str | Path, fps: float):
        self.fps = float(fps)
        self._file = open(path, "wb")
        self._frames = 0

    def _centiseconds(self, k: int) -> int:
        return round((k + 1) * 100 / self.fps) - round(k * 100 / self.fps)

    def write(self, frame: np.ndarray) -> None:
        from PIL import GifImagePlugin, Image

        image = Image.fromarray(frame, "RGB").quantize(colors=256)
        duration_ms = 10 * self._centiseconds(self._frames)
        if self._frames == 0:
            header, _ = GifImagePlugin.getheader(image, info={"loop": 0, "duration": duration_ms})
            self._file.write(b"".join(header))
        for chunk in GifImagePlugin.getdata(image, duration=duration_ms, include_color_table=True):
            self._file.write(chunk)
        self._frames += 1

    def close(self) -> None:
        try:
            if self._frames:
                self._file.write(b";")  # GIF trailer
        finally:
            self._file.close()


class VideoWriter:
    """Writes frames to a temporary file next to `path`, renamed to `path` on a successful close
    (an interrupted race leaves no half-written video). Both formats stream: each GIF frame is
    palettised and appended as it comes (`GifStream`); MP4 frames are piped to ffmpeg (H.264). Memory
    does not grow with the race's length."""

    def __init__(self, path: str | Path, fps: float):
        import imageio

        self.path = check_output_path(path)
        self.fps = float(fps)
        self.format = self.path.suffix.lower()
        self.tmp_path = self.path.with_name(f".{self.path.stem}.partial{os.getpid()}{self.format}")
        self.frames_written = 0
        self.frame_size: tuple[int, int] | None = None
        if self.format == ".gif":
            self._writer = GifStream(self.tmp_path, self.fps)
        else:
            self._writer = imageio.v2.get_writer(
                self.tmp_path,
                format="FFMPEG",
                mode="I",
                fps=self.fps,
                codec="libx264",
                pixelformat="yuv420p",
                quality=8,
                macro_block_size=2,
                ffmpeg_log_level="error",
            )

    def write(self, frame: np.ndarray) -> None:
        frame = np.ascontiguousarray(frame, dtype=np.uint8)
        size = (frame.shape[1], frame.shape[0])
        if self.frame_size is None:
            self.frame_size = size
        elif size != self.frame_size:
            raise ValueError(f"video frame {size} differs from the first frame's size {self.frame_size}")
        if self.format == ".gif":
            self._writer.write(frame)
        else:
            self._writer.append_data(frame)
        self.frames_written += 1

    def close(self, keep: bool = True) -> None:
        try:
            self._writer.close()
        finally:
            if keep and self.frames_written:
                os.replace(self.tmp_path, self.path)
            elif self.tmp_path.exists():
                self.tmp_path.unlink()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close(keep=True)
        else:
            try:
                self.close(keep=False)
            except Exception:
                pass
        return False
