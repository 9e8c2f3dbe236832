"""The code the ``improve`` policy writes: a training script per built-in CSV task and a better
lane-merge strategy. Text only; ``policies`` decides when to write it."""

from __future__ import annotations

import textwrap


def train_script(label: str, kind: str) -> str:
    """train.py for a built-in CSV task: gradient-boosted trees on one-hot encoded features."""
    if kind == "classification":
        estimator = "HistGradientBoostingClassifier"
        fit = f"model.fit(x_train, train[{label!r}])"
        predict = "prediction = model.predict(x_test).astype(int)"
    else:
        # Energy use is skewed and positive: fitting its logarithm evens out the errors.
        estimator = "HistGradientBoostingRegressor"
        fit = f"model.fit(x_train, np.log1p(train[{label!r}]))"
        predict = "prediction = np.expm1(model.predict(x_test))"
    return textwrap.dedent(
        f'''\
        """Gradient-boosted trees on one-hot encoded features; writes submission.csv."""
        from pathlib import Path

        import numpy as np
        import pandas as pd
        from sklearn.ensemble import {estimator}
        from threadpoolctl import threadpool_limits

        HERE = Path(__file__).resolve().parent
        LABEL = {label!r}

        train = pd.read_csv(HERE / "data" / "train.csv")
        test = pd.read_csv(HERE / "data" / "test.csv")
        features = pd.concat([train.drop(columns=[LABEL]), test]).drop(columns=["id"])
        categorical = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
        encoded = pd.get_dummies(features, columns=categorical, dummy_na=True).astype(float)
        x_train, x_test = encoded.iloc[: len(train)], encoded.iloc[len(train) :]

        with threadpool_limits(limits=1):  # one thread: the sandbox has few cores
            model = {estimator}(random_state=0)
            {fit}
            {predict}

        pd.DataFrame({{"id": test["id"], LABEL: prediction}}).to_csv(HERE / "submission.csv", index=False)
        print(f"wrote submission.csv ({{len(test)}} rows)")
        '''
    )


def heredoc(path: str, text: str) -> str:
    return f"cat > {path} << 'EOF'\n{text.rstrip()}\nEOF"


LANE_MERGE_STRATEGY = textwrap.dedent(
    """\
    def row_strategy(history):
        # Go twice, then yield once: the other driver stays cooperative and we merge first most rounds.
        return 0 if len(history) % 3 == 2 else 1
    """
)
