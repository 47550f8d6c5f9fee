"""The discrete action set: Linesight-style combinations of accelerate / brake / left / right.

Each action is a dict of four booleans. The game backend maps them to its own controls; for CarRacing
the continuous control is (steer, gas, brake) with the magnitudes below.
Changing this list changes the network's output size: it needs a fresh run.
"""

inputs = [
    {"accelerate": True, "brake": False, "left": False, "right": False},  # 0 forward
    {"accelerate": True, "brake": False, "left": True, "right": False},  # 1 forward left
    {"accelerate": True, "brake": False, "left": False, "right": True},  # 2 forward right
    {"accelerate": False, "brake": False, "left": False, "right": False},  # 3 coast
    {"accelerate": False, "brake": False, "left": True, "right": False},  # 4 coast left
    {"accelerate": False, "brake": False, "left": False, "right": True},  # 5 coast right
    {"accelerate": False, "brake": True, "left": False, "right": False},  # 6 brake
    {"accelerate": False, "brake": True, "left": True, "right": False},  # 7 brake left
    {"accelerate": False, "brake": True, "left": False, "right": True},  # 8 brake right
    {"accelerate": True, "brake": True, "left": False, "right": False},  # 9 forward + brake
    {"accelerate": True, "brake": True, "left": True, "right": False},  # 10 forward + brake left
    {"accelerate": True, "brake": True, "left": False, "right": True},  # 11 forward + brake right
]

# CarRacing control magnitudes (its gas ramps 0.1 per physics step; brake >= 0.9 locks the wheels).
car_racing_gas = 1.0
car_racing_brake = 0.8
car_racing_steer = 1.0
