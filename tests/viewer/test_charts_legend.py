"""The reward chart's legend names every run, whole: checked on the Vega-Lite spec as Streamlit sends it
(tests/viewer/test_viewer_browser.py looks at the drawn legend in Chromium)."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.elements.vega_charts import _prepare_vega_lite_spec

from air.viewer import charts


def runs_table(count: int) -> pd.DataFrame:
    """Two steps of ``count`` runs named as `air standalone` names its folders: one long shared prefix."""
    names = [f"outputs/standalone/20250101-1200{i:02d}-abcdef{i}" for i in range(count)]
    rows = [
        {"run": name, "step": step, "reward": 0.1 * i + step, "rollouts": 8}
        for i, name in enumerate(names)
        for step in (0, 1)
    ]
    return pd.DataFrame(rows)


def _color(spec: dict) -> dict:
    line, points = (layer["encoding"]["color"] for layer in spec["layer"])
    assert line == points  # one legend for both layers
    return line


@pytest.mark.parametrize("count", [6, 31])
def test_every_run_is_in_the_legend_whole(count: int) -> None:
    table = runs_table(count)
    spec = _prepare_vega_lite_spec(charts.reward_curve(table).to_dict(), use_container_width=True)
    # Streamlit keeps our autosize: the height grows with the legend instead of cutting it at the chart's.
    assert spec["autosize"]["type"] == "fit-x"
    color = _color(spec)
    assert color["field"] == "run" and "scale" not in color  # no domain that could leave a run out
    legend = color["legend"]
    assert legend["symbolLimit"] >= count  # vega drops entries past 30 unless told
    assert legend["labelLimit"] == 0  # no limit: the names differ only at their ends
    assert legend["orient"] == "bottom" and legend["direction"] == "vertical"
    data = spec["datasets"][spec["data"]["name"]]
    assert {row["run"] for row in data} == set(table["run"])
    one = charts.reward_curve(runs_table(1)).to_dict()  # one run: one colour, no legend
    assert all("color" not in layer["encoding"] for layer in one["layer"])
