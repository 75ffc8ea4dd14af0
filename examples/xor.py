"""XOR, the original project's demo: a 2-8-1 network learns it from the gradients of sc.grad.

The loss, the outputs and the four gradients compile into one plan, once.  Each step evaluates
that plan and moves the parameters on the host (gradient descent with momentum), handing the new
values to the leaves with ``assign``: nothing is compiled again.  (An optimizer that writes its
update as graph ops, so that a whole step is one plan, is the next part of the training work.)

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
        return sc.tensor(values.astype(np.float32), requires_grad=True)

    return {
        "w1": weights(2, HIDDEN),
        "b1": sc.zeros((1, HIDDEN), requires_grad=True),
        "w2": weights(HIDDEN, 1),
        "b2": sc.zeros((1, 1), requires_grad=True),
    }


def step_outputs(params: dict) -> dict:
    """The loss, the network's outputs and the loss's gradient for every parameter."""
    hidden = sc.tanh(sc.tensor(X) @ params["w1"] + params["b1"])
    out = sc.sigmoid(hidden @ params["w2"] + params["b2"])
    loss = sc.mean(sc.square(out - sc.tensor(Y)))
    grads = sc.grad(loss, list(params.values()))
    return {"loss": loss, "out": out, **{f"d{name}": g for name, g in zip(params, grads)}}


def build() -> dict:
    return step_outputs(parameters())


def train(steps: int = 1500, lr: float = 2.0, momentum: float = 0.9, seed: int = 0):
    """(final loss, outputs) after ``steps`` steps."""
    params = parameters(seed)
    plan = sc.compile(step_outputs(params))
    velocity = {name: np.zeros(p.shape, np.float32) for name, p in params.items()}
    for _ in range(steps):
        result = plan.evaluate()
        for name, p in params.items():
            velocity[name] = momentum * velocity[name] - lr * result[f"d{name}"]
            p.assign(p.data + velocity[name])
    result = plan.evaluate()
    return float(result["loss"]), result["out"]


if __name__ == "__main__":
    loss, out = train()
    accuracy = float(np.mean((out > 0.5) == (Y > 0.5)))
    print(f"loss {loss:.4f}, accuracy {accuracy:.0%}")
