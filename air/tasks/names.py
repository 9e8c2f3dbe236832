"""Task names as users type them: the names of MLGym's own tasks (so a built-in root can say "that one
is MLGym's"), and the nearest known name for a typo. One place, so every command words them alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# MLGym's task configs (facebookresearch/MLGym configs/tasks/*.yaml): file stem -> task id. None of them
# is built in; naming one without a checkout means the task root is missing, not that the name is wrong.
MLGYM_TASKS: dict[str, str] = {
    "3SATTime": "3SATTime",
    "battleOfSexes": "battleOfSexes",
    "blotto": "blotto",
    "imageCaptioningCOCO": "imageCaptioningCOCO",
    "imageClassificationCifar10": "imageClassificationCifar10",
    "imageClassificationCifar10L1": "imageClassificationCifar10",
    "imageClassificationFMnist": "imageClassificationFMnist",
    "languageModelingFineWeb": "languageModelingFineWeb",
    "naturalLanguageInferenceMNLI": "naturalLanguageInferenceMNLI",
    "prisonersDilemma": "prisonersDilemma",
    "regressionHousePrice": "regressionHousePrice",
    "regressionHousingPrice": "regressionHousingPrice",
    "regressionKaggleHousePrice": "regressionKaggleHousePrice",
    "regressionKaggleHousePriceL1": "regressionKaggleHousePriceL1",
    "rlBreakoutMinAtar": "rlBreakoutMinAtar",
    "rlMetaMaze": "rlMetaMazeMisc",
    "rlMountainCarContinuous": "rlMountainCarContinuous",
    "rlMountainCarContinuousReinforce": "rlMountainCarContinuousReinforce",
    "titanic": "titanicSurvival",
}
MLGYM_ROOT_FIX = "export MLGYM_ROOT=/path/to/MLGym (a checkout of facebookresearch/MLGym)"


def config_stem(name: str) -> str:
    """``titanic.yaml``, ``configs/tasks/titanic.yml`` -> ``titanic``."""
    return name.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")


def is_mlgym_task(name: str) -> bool:
    """Whether ``name`` names one of MLGym's tasks, by config file or id, in any case."""
    wanted = config_stem(name).lower()
    return any(wanted in (stem.lower(), task_id.lower()) for stem, task_id in MLGYM_TASKS.items())


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` most likely meant: the same letters in another case, else the closest."""
    known = list(dict.fromkeys(known))
    wanted = config_stem(name)
    same_letters = [k for k in known if k.lower() == wanted.lower()]
    if same_letters:
        return same_letters[0]
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(wanted.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None
