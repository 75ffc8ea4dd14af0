"""A two-layer MLP forward pass with a mean-squared loss.

softcuda run examples/mlp.py            # evaluate and show the plan with times
softcuda run examples/mlp.py --explain  # show which CONFIG.soft line decided each node
python examples/mlp.py                  # plain Python works too
"""

import softcuda as sc

BATCH, IN, HIDDEN, OUT = 256, 784, 512, 10


def build():
    x = sc.randn((BATCH, IN), seed=0)
    w1 = sc.randn((IN, HIDDEN), seed=1) * (1.0 / IN**0.5)
    b1 = sc.zeros((HIDDEN,))
    w2 = sc.randn((HIDDEN, OUT), seed=2) * (1.0 / HIDDEN**0.5)
    b2 = sc.zeros((OUT,))
    target = sc.randn((BATCH, OUT), seed=3)
    hidden = sc.relu(x @ w1 + b1)
    logits = hidden @ w2 + b2
    loss = sc.mean(sc.square(logits - target))
    return {"logits": logits, "loss": loss}


if __name__ == "__main__":
    result = sc.compile(build()).evaluate()
    print("loss", float(result["loss"]))
