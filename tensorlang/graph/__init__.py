"""The graph layer: operators as nodes, reverse- and forward-mode autodiff, and an executor
that runs every op as a tensorlang kernel.

    import tensorlang.graph as G
    x1, x2 = G.Variable("x1"), G.Variable("x2")
    y = G.log(x1) + x1 * x2 - G.sin(x2)
    g1, g2 = G.gradients(y, [x1, x2])
    y_val, g1_val, g2_val = G.Executor([y, g1, g2]).run(feed_dict={x1: 2.0, x2: 5.0})
"""

from .api import (  # noqa: F401
    Variable, add, avg_pool2d, batch_norm, broadcast_to, concat, constant, conv2d, cos, div,
    equal, exp, layer_norm, log, log_softmax, make, matmul, max, max_pool2d, mean, mse_loss,
    mul, neg, power, relu, reshape, sigmoid, sin, softmax, softmax_cross_entropy, sqrt, sub,
    slice, sum, tanh, transpose, zeros_like,
)
from . import model_ops, nnops, ops  # noqa: F401  (register the ops: registry.OPS)
from .model_ops import cast  # noqa: F401
from .quantized import (  # noqa: F401
    conv_integer, dequantize_linear, matmul_integer, quantize_linear, round,
)
from .autodiff import gradients, jvp  # noqa: F401
from ..backends.array_cache import (  # noqa: F401
    empty_cache as empty_array_cache, info as array_cache_info,
    set_limit as set_array_cache_limit,
)
from .executor import Executor, default_schedules  # noqa: F401
from .node import Graph, GraphError, Node, topological_order  # noqa: F401
from .ops import OPS  # noqa: F401
from .rewrite import optimize, rewrite  # noqa: F401
from .rule_search import CostModel, search  # noqa: F401
from . import substitutions  # noqa: F401  (a public module: the generated rules)
