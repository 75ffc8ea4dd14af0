"""XOR, the original project's demo: a 2-8-1 network learns it with SGD and momentum.

One plan holds the whole training step: the forward pass, the gradients of sc.grad and the
optimizer's update (softcuda.optim), whose new values are written into the parameters in place
at the end of every run.  It is compiled once; each step is one ``plan.evaluate()``.

softcuda run examples/xor.py   # the training step's plan: placement and time per node
python examples/xor.py         # train, and print the loss and the accuracy
"""

import numpy as np

import softcuda as sc

X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
Y = np.array([[0], [1], [1], [0]], np.float32)
HIDDEN = 8


def parameters(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def weights(fan_in: int, fan_out: int):
        values = rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)
        return sc.tensor(values.astype(np.float32))

    return {
        "w1": weights(2, HIDDEN),
        "b1": sc.zeros((1, HIDDEN)),
        "w2": weights(HIDDEN, 1),
        "b2": sc.zeros((1, 1)),
    }


def training_step(params: dict, lr: float = 2.0, momentum: float = 0.9) -> sc.Graph:
    """The loss and the network's outputs, with the optimizer's updates: one step."""
    hidden = sc.tanh(sc.tensor(X) @ params["w1"] + params["b1"])
    out = sc.sigmoid(hidden @ params["w2"] + params["b2"])
    loss = sc.mean(sc.square(out - sc.tensor(Y)))
    opt = sc.optim.SGD(list(params.values()), lr=lr, momentum=momentum)
    return sc.Graph({"loss": loss, "out": out}, opt.minimize(loss))


def build() -> sc.Graph:
    return training_step(parameters())


def train(steps: int = 1500, seed: int = 0):
    """(final loss, outputs) after ``steps`` steps."""
    plan = sc.compile(training_step(parameters(seed)))
    result = None
    for _ in range(steps + 1):  # each run reports the loss before its own update
        result = plan.evaluate()
    return float(result["loss"]), result["out"]


if __name__ == "__main__":
    loss, out = train()
    accuracy = float(np.mean((out > 0.5) == (Y > 0.5)))
    print(f"loss {loss:.4f}, accuracy {accuracy:.0%}")
