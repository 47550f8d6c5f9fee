"""The action set on a Gymnasium env: each action's env action number, from the config or from the env's action
meanings (ALE's: "NOOP", "FIRE", "UP", "RIGHT", ..., "DOWNLEFTFIRE": each a combination of the words NOOP, FIRE, UP,
DOWN, LEFT, RIGHT)."""

from __future__ import annotations

import re

from trackmania_rl.config.schema import ACTION_FLAGS, ConfigError

MEANING_WORDS = ("NOOP", "FIRE", "UP", "DOWN", "LEFT", "RIGHT")
_WORD = re.compile("|".join(MEANING_WORDS))


def meaning_words(meaning: str) -> frozenset | None:
    """The words an action meaning combines ("DOWNLEFTFIRE" -> {DOWN, LEFT, FIRE}; "NOOP" -> {}); None when it is not
    made of MEANING_WORDS only."""
    words = _WORD.findall(meaning)
    if "".join(words) != meaning:
        return None
    return frozenset(w for w in words if w != "NOOP")


def action_name(action: dict) -> str:
    """An action of the action set as config writes it: "coast" or flags joined by "+"."""
    return "+".join(f for f in ACTION_FLAGS if action[f]) or "coast"


def env_actions(cfg, n_env_actions: int, meanings: list[str] | None) -> list[int]:
    """The env action number of each action of `cfg.inputs`. ConfigError naming the setting when one maps to nothing."""
    env_id = cfg.gymnasium_env_id
    if cfg.gymnasium_actions is not None:
        bad = [a for a in cfg.gymnasium_actions if not 0 <= a < n_env_actions]
        if bad:
            raise ConfigError(f"setting `gymnasium_actions` holds {bad[0]}: {env_id} has actions 0 to {n_env_actions - 1}")
        return list(cfg.gymnasium_actions)
    if cfg.gymnasium_action_words is None or meanings is None:
        why = "it has no action meanings" if meanings is None else "`gymnasium_action_words` is None"
        raise ConfigError(
            f"the action set cannot be mapped to {env_id}'s actions ({why}): set `gymnasium_actions`, one env action per "
            "action, or `gymnasium_action_words` (the words of accelerate, brake, left, right in its action meanings)"
        )
    by_words = {}
    for number, meaning in enumerate(meanings):
        words = meaning_words(meaning)
        if words is not None:
            by_words.setdefault(words, number)
    numbers = []
    for action in cfg.inputs:
        words = frozenset(word for flag, word in zip(ACTION_FLAGS, cfg.gymnasium_action_words, strict=True) if action[flag])
        if words not in by_words:
            wanted = "+".join(sorted(words)) or "NOOP"
            raise ConfigError(
                f"setting `action_set`: action {action_name(action)!r} is {wanted} by `gymnasium_action_words`, which {env_id}'s "
                f"actions ({', '.join(meanings)}) do not have: remove it from the action set or set `gymnasium_actions`"
            )
        numbers.append(by_words[words])
    return numbers
