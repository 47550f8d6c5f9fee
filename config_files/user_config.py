"""Machine settings: not part of a run's hyper-parameters, not hot-reloaded."""

# "auto" picks CUDA when torch sees a GPU, else the CPU. Or name one: "cpu", "cuda", "cuda:1".
device = "auto"

# Which game the collectors drive: "carracing" (built in, headless) or "trackmania" (needs TMInterface).
game_backend = "carracing"

# Where runs keep their checkpoints and TensorBoard logs (relative paths are relative to the repository).
save_dir = "save"
tensorboard_dir = "tensorboard"

# Trackmania backend only.
trackmania_base_path = ""
base_tmi_port = 8478
