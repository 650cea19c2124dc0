"""Real architectures, built from torch.nn without weights, small enough for the tests and `make bench`: the
shapes of the models learners point the instruments at (GPT-2, ViT-B/16, BERT, ResNet-18, an LSTM, a GRU over
20 steps, checkpointed blocks, a custom autograd.Function). Their structure (layers, branches, parameters per
module) is the real one; their widths are small, so that a forward pass takes milliseconds. torchvision is not
in the test extra (it would need a lock of its own builds), so the ResNet is written here too.
bench_own_models times their drawing."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


class Attention(nn.Module):
    """GPT-2's causal self-attention with separate q, k, v projections."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2's layout: token and position embeddings, pre-LN blocks in ``h``, a final LayerNorm, the
    language-model head tied to the token embedding."""

    def __init__(self, layers: int = 12, d: int = 64, heads: int = 4, vocab: int = 100, context: int = 16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.h = nn.ModuleList(GPT2Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def gpt2_loss(layers: int = 12, batch: int = 2):
    torch.manual_seed(0)
    model = GPT2(layers)
    idx = torch.randint(0, 100, (batch, 16))
    logits = model(idx)
    return model, F.cross_entropy(logits.flatten(0, 1), idx.flatten())


class ViTBlock(nn.Module):
    """torchvision's ViT encoder block: LayerNorm, nn.MultiheadAttention, LayerNorm, MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attention = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln_1(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    """ViT-B/16's layout (12 blocks, 16 x 16 patches, a class token), narrow: 64 wide, 64 x 64 images."""

    def __init__(self, layers: int = 12, d: int = 64, heads: int = 4, image: int = 64, classes: int = 10):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, d, kernel_size=16, stride=16)
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embedding = nn.Parameter(torch.randn(1, (image // 16) ** 2 + 1, d) * 0.02)
        self.layers = nn.Sequential(*(ViTBlock(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, images):
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])


def vit_loss(layers: int = 12, batch: int = 2):
    torch.manual_seed(0)
    model = ViT(layers)
    out = model(torch.randn(batch, 3, 64, 64))
    return model, F.cross_entropy(out, torch.arange(batch) % 10)


class BERT(nn.Module):
    """BERT's layout: word, position and token-type embeddings, LayerNorm, post-LN encoder layers, a pooler."""

    def __init__(self, layers: int = 4, d: int = 64, heads: int = 4, vocab: int = 100, context: int = 16):
        super().__init__()
        self.word, self.position, self.token_type = nn.Embedding(vocab, d), nn.Embedding(context, d), nn.Embedding(2, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(d, d)

    def forward(self, idx, mask):
        x = self.word(idx) + self.position(torch.arange(idx.shape[1])) + self.token_type(torch.zeros_like(idx))
        x = self.encoder(self.norm(x), src_key_padding_mask=~mask)
        return torch.tanh(self.pooler(x[:, 0]))


def bert_loss(layers: int = 4):
    torch.manual_seed(0)
    model = BERT(layers)
    idx = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, 10:] = False
    return model, model(idx, mask).square().mean()


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 layout (stem, four stages of two BasicBlocks, pooling, fc), 8 channels wide."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], width
        for k in range(4):
            cout = width * 2**k
            stages.append(nn.Sequential(BasicBlock(cin, cout, 1 if k == 0 else 2), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet_loss():
    torch.manual_seed(0)
    model = ResNet18()
    return model, F.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 2]))


def lstm_loss():
    torch.manual_seed(0)
    model = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    out, _ = model(torch.randn(2, 5, 8))
    return model, out.square().mean()


def gru_loss(layers: int = 2, steps: int = 20):
    """A GRU from torch.nn over ``steps`` steps of a sequence, its output summed: the same weights met at every
    step, the graph unrolled over time (CPU torch builds each step from separate operations)."""
    torch.manual_seed(0)
    model = nn.GRU(8, 16, num_layers=layers)
    out, _ = model(torch.randn(steps, 2, 8))
    return model, out.sum()


class Checkpointed(nn.Module):
    """Four Linear-Tanh blocks, each run under non-reentrant activation checkpointing."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


def checkpointed_loss():
    torch.manual_seed(0)
    model = Checkpointed()
    return model, model(torch.randn(3, 8)).sum()


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


class CubeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return Cube.apply(self.fc(x))


def custom_function_loss():
    torch.manual_seed(0)
    model = CubeNet()
    return model, model(torch.randn(2, 4)).sum()


ALL = {
    "gpt2": gpt2_loss, "vit": vit_loss, "bert": bert_loss, "resnet": resnet_loss, "lstm": lstm_loss,
    "gru": gru_loss, "checkpointed": checkpointed_loss, "custom_function": custom_function_loss,
}


def _gpt2_forward(model):
    return model(torch.randint(0, 100, (2, 16))).float().square().mean()


def _vit_forward(model):
    return model(torch.randn(2, 3, 64, 64)).float().square().mean()


def _gru_forward(model):
    return model(torch.randn(20, 2, 8))[0].sum()


# name -> (the model, its forward pass to a loss): the learner's own models that `make bench` draws
OWN_MODELS = {
    "GPT-2-style, 12 blocks": (GPT2, _gpt2_forward),
    "ViT-B/16-style, 12 blocks": (ViT, _vit_forward),
    "GRU (torch.nn), 2 layers, 20 steps": (lambda: nn.GRU(8, 16, num_layers=2), _gru_forward),
}
MAKE_DOT_LIMIT_S = 120.0  # torchviz's drawing of a model unrolled over time may take longer than this to lay out


def _make_dot_seconds(loss, model, runs: int) -> float | None:
    """Median seconds to lay torchviz.make_dot's drawing out with the course's engine; None when one layout takes
    longer than MAKE_DOT_LIMIT_S (not tried again)."""
    import statistics
    import time

    import torchviz

    from autograd_lab.engine import GraphTooSlow
    from autograd_lab.graph import svg_of

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        try:
            svg_of(torchviz.make_dot(loss, params=dict(model.named_parameters())).source, timeout=MAKE_DOT_LIMIT_S)
        except GraphTooSlow:
            return None
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def bench_own_models(runs: int = 3, names=None) -> list:
    """Rows for `make bench`: seconds to draw each of the learner's own models (all, or ``names`` of
    ``OWN_MODELS``) as a learner would (record_modules, then draw_graph with module names, folding and rolling,
    laid out), against torchviz.make_dot laid out by the same engine (None: not within MAKE_DOT_LIMIT_S)."""
    import statistics
    import time

    from autograd_lab.graph import draw_graph
    from autograd_lab.modules import record_modules

    rows = []
    for name in names or OWN_MODELS:
        build, forward = OWN_MODELS[name]
        torch.manual_seed(0)
        model = build()
        with record_modules(model):
            loss = forward(model)
        ours = []
        for _ in range(runs):
            start = time.perf_counter()
            bundle = draw_graph(loss, params=model)._repr_mimebundle_()
            ours.append(time.perf_counter() - start)
        rows.append({"model": name, "picture": "image/svg+xml" in bundle,
                     "draw_graph_s": round(statistics.median(ours), 3),
                     "make_dot_s": _make_dot_seconds(loss, model, runs)})
    return rows
