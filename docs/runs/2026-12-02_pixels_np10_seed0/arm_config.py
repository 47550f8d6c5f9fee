"""The pixels-only recipe (carracing_pixels.py) with no_progress_penalty = 10: the arm of issue 64 point 3 against the
pixels agent's lost races (a spin, then the rest of the clock driven back down the track)."""

base = "carracing_pixels.py"

no_progress_penalty = 10.0
