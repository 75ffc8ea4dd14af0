"""Handwritten digits: a 64-32-10 network learns scikit-learn's bundled 8x8 digits with Adam.

The training step (forward pass, softmax cross-entropy, gradients, Adam's update) compiles into
one plan, once; each minibatch is handed to the input leaves with ``assign`` and the step is one
``plan.evaluate()``, which writes the new parameters and Adam's state in place.  A second plan
(the forward pass over the test set) reads the same parameter leaves.

Needs scikit-learn for the data set (bundled with it, no download):
pip install 'softcuda[digits]'

softcuda run examples/digits.py   # the training step's plan: placement and time per node
python examples/digits.py         # train, and print the test accuracy
"""

import sys
import time

import numpy as np

import softcuda as sc

HIDDEN, CLASSES, BATCH = 32, 10, 64
LR, WEIGHT_DECAY = 5e-3, 1e-3
SPLIT_SEED = 0  # the train/test split: one for every run, so accuracies compare
INSTALL = "examples/digits.py needs scikit-learn for its data: pip install 'softcuda[digits]'"


def load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): a fixed fifth of the 1797 images held out for
    testing, each pixel standardised by the training set's mean and deviation (plus 0.1, so
    that border pixels, nearly always blank, are not blown up), labels as integers."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError(INSTALL) from None
    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    test, train = order[: len(x) // 5], order[len(x) // 5 :]
    mean, scale = x[train].mean(axis=0), x[train].std(axis=0) + 0.1
    x = ((x - mean) / scale).astype(np.float32)
    return x[train], y[train], x[test], y[test]


def one_hot(labels: np.ndarray) -> np.ndarray:
    return np.eye(CLASSES, dtype=np.float32)[labels]


def parameters(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)

    def weights(fan_in: int, fan_out: int):
        values = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
        return sc.tensor(values.astype(np.float32))

    return [
        weights(64, HIDDEN),
        sc.zeros((HIDDEN,)),
        weights(HIDDEN, CLASSES),
        sc.zeros((CLASSES,)),
    ]


def forward(params: list, x: sc.Tensor) -> sc.Tensor:
    w1, b1, w2, b2 = params
    return sc.relu(x @ w1 + b1) @ w2 + b2


def training_step(params: list, x: sc.Tensor, target: sc.Tensor, lr: float) -> sc.Graph:
    """The cross-entropy (``target`` one-hot rows, assigned per minibatch), and Adam's updates
    for it plus a small L2 penalty on the weights."""
    loss = sc.cross_entropy(forward(params, x), target)
    w1, _, w2, _ = params
    penalized = loss + (sc.sum(sc.square(w1)) + sc.sum(sc.square(w2))) * WEIGHT_DECAY
    return sc.Graph({"loss": loss}, sc.optim.Adam(params, lr=lr).minimize(penalized))


def build() -> sc.Graph:
    x_train, y_train, _, _ = load()
    x = sc.tensor(x_train[:BATCH])
    target = sc.tensor(one_hot(y_train[:BATCH]))
    return training_step(parameters(), x, target, lr=LR)


def train(epochs: int = 60, lr: float = LR, seed: int = 0) -> tuple[float, float, float]:
    """(test accuracy, last epoch's mean loss, seconds of training) after ``epochs`` passes
    over the training set in minibatches of BATCH (the last partial batch left out); ``seed``
    draws the initial weights and the order of the minibatches."""
    x_train, y_train, x_test, y_test = load()
    params = parameters(seed)
    x = sc.tensor(np.zeros((BATCH, 64), np.float32))
    target = sc.tensor(np.zeros((BATCH, CLASSES), np.float32))
    step = sc.compile(training_step(params, x, target, lr))
    test = sc.compile(forward(params, sc.tensor(x_test)))
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for first in range(0, len(order) - BATCH + 1, BATCH):
            batch = order[first : first + BATCH]
            x.assign(x_train[batch])
            target.assign(one_hot(y_train[batch]))
            losses.append(float(step.evaluate()["loss"]))
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(np.argmax(test.evaluate(), axis=1) == y_test))
    return accuracy, float(np.mean(losses)), seconds


if __name__ == "__main__":
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print(INSTALL, file=sys.stderr)
        sys.exit(2)
    accuracy, loss, seconds = train()
    print(f"test accuracy {accuracy:.1%} (last epoch's loss {loss:.4f}, {seconds:.1f} s training)")
