"""Decision Transformer (Chen et al. 2021) and the MLP behaviour-cloning policy it is compared with.

`DecisionTransformer` is a causal GPT-style transformer over interleaved (R̂_t, s_t, a_t) tokens
(`seqrl.core.sequences`), as in the official code: a GPT-2 block stack (pre-LayerNorm, fused QKV,
ReLU MLP of width 4d, dropout on embeddings, attention and residuals, final LayerNorm) with GPT-2's
positional embedding replaced by a learned per-timestep embedding added to all three tokens of a
step; a LayerNorm over the embedded tokens; the action a_t read from the output at the *state*
token s_t. Attention is `torch.nn.functional.scaled_dot_product_attention` with a causal mask
(plus the padding mask of left-padded contexts). At the paper's size it trains as fast as
`transformers.GPT2Model` with `inputs_embeds` on one CPU thread (≈ 1.0×, docs/algorithms/dt.md),
with no GPT-2 config to bend (vocabulary, positions, token ids) and full control of the padding
mask; a test checks it against `GPT2Model` with the same weights.

The model owns its input normalisation as buffers saved with the weights: states are normalised
with the dataset's mean/std, returns-to-go divided by the return scale, and the tanh head rescaled
to the action bounds. Callers pass raw environment values.

Action heads (``action_head``): ``"tanh"`` — a linear layer, tanh, rescaled to [low, high]
(continuous, deterministic: the official DT head); ``"categorical"`` — logits over `action_dim`
discrete actions (discrete actions are embedded with an ``nn.Embedding``). `encode` returns the
state-token features, so other heads (Online DT's squashed Gaussian) sit on the same body.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqrl.core.sequences import causal_attention_mask, interleave, interleave_mask
from seqrl.models.config import DTModelConfig

__all__ = ["ACTION_HEADS", "DTModelConfig", "DecisionTransformer", "MLPPolicy"]

ACTION_HEADS = ("tanh", "categorical")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def _as_buffer(value, size: int, default: float, name: str) -> torch.Tensor:
    if value is None:
        return torch.full((size,), default, dtype=torch.float32)
    t = torch.as_tensor(np.asarray(value, dtype=np.float32)).reshape(-1)
    if t.numel() != size:
        raise ValueError(f"DecisionTransformer: {name} must have {size} values (got {t.numel()})")
    return t.clone()


class Block(nn.Module):
    """One GPT-2 block: x + Attn(LN(x)), then x + MLP(LN(x)), causal (and padding) masked."""

    def __init__(self, d: int, n_head: int, dropout: float, activation: str) -> None:
        super().__init__()
        if d % n_head:
            raise ValueError(f"hidden_size ({d}) must be divisible by n_head ({n_head})")
        self.n_head = n_head
        self.dropout = dropout
        self.ln_1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.act = ACTIVATIONS[activation]()
        self.mlp_proj = nn.Linear(4 * d, d)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, queries: slice | None = None) -> torch.Tensor:
        """x (B, L, d) → (B, L, d); with `queries`, the outputs at those positions only (B, Lq, d): every
        position gives its key and value, the rest of the block runs on the queried rows alone."""
        B, L, d = x.shape
        h = self.n_head
        y = self.ln_1(x)  # (B, L, d)
        p = self.dropout if self.training else 0.0
        if queries is None:
            q, k, v = self.qkv(y).view(B, L, 3, h, d // h).permute(2, 0, 3, 1, 4)  # 3 × (B, h, L, d/h)
            if allowed is None:
                a = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, h, L, d/h)
            else:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)  # (B, h, L, d/h)
        else:
            w_q, w_kv = self.qkv.weight.split([d, 2 * d])  # the fused weight's q rows and k, v rows
            b_q, b_kv = self.qkv.bias.split([d, 2 * d])
            x = x[:, queries]  # (B, Lq, d)
            q = F.linear(y[:, queries], w_q, b_q).view(B, x.shape[1], h, d // h).transpose(1, 2)  # (B, h, Lq, d/h)
            k, v = F.linear(y, w_kv, b_kv).view(B, L, 2, h, d // h).permute(2, 0, 3, 1, 4)  # 2 × (B, h, L, d/h)
            if allowed is None:
                pos = torch.arange(L, device=x.device)
                allowed = pos[None, :] <= pos[queries][:, None]  # (Lq, L) causal
            else:
                allowed = allowed[:, :, queries]  # (B, 1, Lq, L)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)  # (B, h, Lq, d/h)
        x = x + self.resid_drop(self.attn_proj(a.transpose(1, 2).reshape(B, -1, d)))  # (B, L or Lq, d)
        return x + self.resid_drop(self.mlp_proj(self.act(self.fc(self.ln_2(x)))))  # (B, L or Lq, d)


class TanhHead(nn.Module):
    """a = low + (tanh(W h + b) + 1)/2 · (high − low): features (…, d) → actions (…, A) in [low, high]."""

    def __init__(self, d: int, action_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d, action_dim)

    def forward(self, h: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
        return low + (torch.tanh(self.linear(h)) + 1) * 0.5 * (high - low)  # (…, A)


class DecisionTransformer(nn.Module):
    """Causal transformer over (R̂_t, s_t, a_t) tokens predicting a_t from the s_t token.

    state_dim, action_dim: sizes (discrete: action_dim = number of actions)
    hidden_size:  d, the token width (paper: 128)
    n_layer, n_head: blocks and heads (paper: 3, 1)
    context_len:  K, steps per context (3K tokens; paper: 20)
    max_ep_len:   size of the timestep embedding; timesteps must lie in [0, max_ep_len)
    dropout:      on embeddings, attention weights and residuals (paper: 0.1)
    activation:   MLP non-linearity ("relu" as in the official gym code, or "gelu")
    action_head:  "tanh" (continuous) or "categorical" (discrete)
    embed_init:   "gpt2" (N(0, 0.02) like every layer) or "pytorch" (default init of the linear R̂/state/action
                  embeddings, as the official code and d3rlpy; see docs/algorithms/dt.md for when it helps)
    timestep_embedding: add the learned timestep embedding to every token (the DT paper; the official
                  Online DT trains without it, ``ordering 0``: order comes from the causal mask alone)
    rollout_context: steps of history `get_action` reads (≤ K; None: K). The official Online DT trains
                  on K = 20 but acts on the last 5 steps, left-padded to K
    action_low/high: bounds of the tanh head (default −1, 1)
    state_mean/std: state normaliser (default 0, 1); return_scale: R̂ is divided by it (MuJoCo: 1000)
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        hidden_size: int = 128,
        n_layer: int = 3,
        n_head: int = 1,
        context_len: int = 20,
        max_ep_len: int = 1000,
        dropout: float = 0.1,
        activation: Literal["relu", "gelu"] = "relu",
        action_head: Literal["tanh", "categorical"] = "tanh",
        embed_init: Literal["gpt2", "pytorch"] = "gpt2",
        timestep_embedding: bool = True,
        rollout_context: int | None = None,
        action_low=None,
        action_high=None,
        state_mean=None,
        state_std=None,
        return_scale: float = 1.0,
    ) -> None:
        super().__init__()
        for name, value in (("state_dim", state_dim), ("action_dim", action_dim), ("hidden_size", hidden_size),
                            ("n_layer", n_layer), ("n_head", n_head), ("context_len", context_len),
                            ("max_ep_len", max_ep_len)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DecisionTransformer: {name} must be an int >= 1 (got {value!r})")
        if action_head not in ACTION_HEADS:
            raise ValueError(f"DecisionTransformer: action_head must be one of {ACTION_HEADS} (got {action_head!r})")
        if activation not in ACTIVATIONS:
            raise ValueError(f"DecisionTransformer: activation must be one of {tuple(ACTIVATIONS)} (got {activation!r})")
        if not 0 <= dropout < 1:
            raise ValueError(f"DecisionTransformer: dropout must be in [0, 1) (got {dropout})")
        if embed_init not in ("gpt2", "pytorch"):
            raise ValueError(f"DecisionTransformer: embed_init must be 'gpt2' or 'pytorch' (got {embed_init!r})")
        if not return_scale > 0:
            raise ValueError(f"DecisionTransformer: return_scale must be > 0 (got {return_scale})")
        if rollout_context is not None and not (isinstance(rollout_context, int) and 1 <= rollout_context <= context_len):
            raise ValueError(f"DecisionTransformer: rollout_context must be an int in [1, context_len = {context_len}] "
                             f"or None (got {rollout_context!r})")
        self.kwargs = dict(state_dim=state_dim, action_dim=action_dim, hidden_size=hidden_size, n_layer=n_layer,
                           n_head=n_head, context_len=context_len, max_ep_len=max_ep_len, dropout=dropout,
                           activation=activation, action_head=action_head, embed_init=embed_init)
        if not timestep_embedding or rollout_context is not None:  # only when set: older checkpoints stay loadable
            self.kwargs.update(timestep_embedding=bool(timestep_embedding), rollout_context=rollout_context)
        self.rollout_context = context_len if rollout_context is None else rollout_context
        self.state_dim, self.action_dim = state_dim, action_dim
        self.context_len, self.max_ep_len = context_len, max_ep_len
        self.discrete = action_head == "categorical"
        d = hidden_size

        self.embed_timestep = nn.Embedding(max_ep_len, d) if timestep_embedding else None
        self.embed_return = nn.Linear(1, d)
        self.embed_state = nn.Linear(state_dim, d)
        self.embed_action = nn.Embedding(action_dim, d) if self.discrete else nn.Linear(action_dim, d)
        self.embed_ln = nn.LayerNorm(d)
        self.embed_drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d, n_head, dropout, activation) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, action_dim) if self.discrete else TanhHead(d, action_dim)

        self.register_buffer("state_mean", _as_buffer(state_mean, state_dim, 0.0, "state_mean"))
        self.register_buffer("state_std", _as_buffer(state_std, state_dim, 1.0, "state_std"))
        self.register_buffer("return_scale", torch.tensor(float(return_scale)))
        self.register_buffer("action_low", _as_buffer(action_low, action_dim, -1.0, "action_low"))
        self.register_buffer("action_high", _as_buffer(action_high, action_dim, 1.0, "action_high"))
        if not self.discrete and not bool((self.action_high > self.action_low).all()):
            raise ValueError("DecisionTransformer: action_high must be > action_low in every dimension")
        if not bool((self.state_std > 0).all()):
            raise ValueError("DecisionTransformer: state_std must be > 0")
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2: residual projections scaled by 1/sqrt(2·n_layer)
            for proj in (block.attn_proj, block.mlp_proj):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layer))
        if embed_init == "pytorch":
            # The linear input embeddings keep PyTorch's default (Kaiming-uniform) init, as in the official
            # code and d3rlpy: +17 points on quick Pendulum, the same on Hopper-medium (docs/algorithms/dt.md);
            # GPT-2's init stays the default, with which the MuJoCo results were measured. The timestep
            # embedding is always N(0, 0.02): at PyTorch's N(0, 1), as in the official code, Pendulum
            # scored 38.6 vs 81.8.
            for embed in (self.embed_return, self.embed_state, self.embed_action):
                if isinstance(embed, nn.Linear):
                    embed.reset_parameters()

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def _check(self, returns, states, actions, timesteps, attention_mask) -> torch.Tensor:
        if states.dim() != 3 or states.shape[-1] != self.state_dim:
            raise ValueError(f"DecisionTransformer: states must have shape (B, K, {self.state_dim}) "
                             f"(got {tuple(states.shape)})")
        B, K = states.shape[:2]
        if K > self.context_len:
            raise ValueError(f"DecisionTransformer: {K} steps exceed the context K = {self.context_len}")
        if returns.dim() == 2:
            returns = returns[..., None]
        want_actions = (B, K) if self.discrete else (B, K, self.action_dim)
        for name, t, want in (("returns", returns, (B, K, 1)), ("actions", actions, want_actions),
                              ("timesteps", timesteps, (B, K)),
                              ("attention_mask", attention_mask, (B, K))):
            if t is not None and tuple(t.shape) != want:
                raise ValueError(f"DecisionTransformer: {name} must have shape {want} (got {tuple(t.shape)})")
        if torch.compiler.is_compiling():  # value checks would break the graph; shapes were checked above
            return returns
        if timesteps.numel() and (int(timesteps.min()) < 0 or int(timesteps.max()) >= self.max_ep_len):
            raise ValueError(f"DecisionTransformer: timesteps must lie in [0, max_ep_len = {self.max_ep_len}) "
                             f"(got {int(timesteps.min())}..{int(timesteps.max())})")
        return returns

    def encode(
        self,
        returns: torch.Tensor,
        states: torch.Tensor,
        actions: torch.Tensor,
        timesteps: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Output features at the state tokens: (B, K, d). Inputs as in `forward`."""
        returns = self._check(returns, states, actions, timesteps, attention_mask)
        B, K = states.shape[:2]
        time = self.embed_timestep(timesteps) if self.embed_timestep is not None else 0.0  # (B, K, d)
        s = (states - self.state_mean) / self.state_std  # (B, K, S)
        r_tok = self.embed_return(returns / self.return_scale) + time  # (B, K, d)
        s_tok = self.embed_state(s) + time  # (B, K, d)
        a_tok = self.embed_action(actions) + time  # (B, K, d)
        x = self.embed_drop(self.embed_ln(interleave(r_tok, s_tok, a_tok)))  # (B, 3K, d)
        allowed = None
        if attention_mask is not None and (torch.compiler.is_compiling() or not bool(attention_mask.bool().all())):
            allowed = causal_attention_mask(interleave_mask(attention_mask))  # (B, 1, 3K, 3K)
        for block in self.blocks[:-1]:
            x = block(x, allowed)  # (B, 3K, d)
        # only the state tokens' outputs are read: the last block runs on them alone (keys/values from all)
        return self.ln_f(self.blocks[-1](x, allowed, queries=slice(1, None, 3)))  # (B, K, d)

    def forward(
        self,
        returns: torch.Tensor,
        states: torch.Tensor,
        actions: torch.Tensor,
        timesteps: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Predicted actions at every step: bounded actions (B, K, A), or logits (B, K, n) when discrete.

        returns: (B, K) or (B, K, 1) raw returns-to-go R̂_t; states: (B, K, S) raw states;
        actions: (B, K, A) float, or (B, K) long when discrete (a_t is not seen by the prediction at t);
        timesteps: (B, K) long in [0, max_ep_len); attention_mask: (B, K), 1 on real steps, 0 on the
        left padding (None: all real).
        """
        h = self.encode(returns, states, actions, timesteps, attention_mask)  # (B, K, d)
        if self.discrete:
            return self.head(h)  # (B, K, n)
        return self.head(h, self.action_low, self.action_high)  # (B, K, A)

    @torch.no_grad()
    def get_action(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        returns_to_go: torch.Tensor,
        timesteps: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The deterministic action for the last step of a history (tanh mean / argmax).

        Histories are (T, …) for one episode or (B, T, …) for a batch, any T ≥ 1: the last
        `rollout_context` steps (default K) are used, left-padded to K. `actions` may hold T − 1 steps (the current action is not
        known yet; a placeholder is appended — the prediction at t never reads a_t). Returns (A,) /
        (B, A), or () / (B,) long when discrete.
        """
        single = states.dim() == 2
        if single:
            states, actions, returns_to_go, timesteps = (x[None] for x in (states, actions, returns_to_go, timesteps))
            attention_mask = None if attention_mask is None else attention_mask[None]
        B, T = states.shape[:2]
        if returns_to_go.dim() == 3:
            returns_to_go = returns_to_go[..., 0]
        if actions.shape[1] == T - 1:
            actions = torch.cat([actions, actions.new_zeros((B, 1, *actions.shape[2:]))], dim=1)  # T = 1: empty history
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.long, device=states.device)
        K, C = self.context_len, self.rollout_context
        seqs = [states, actions, returns_to_go, timesteps, attention_mask]
        if T > C:
            seqs, T = [x[:, T - C :] for x in seqs], C
        if T < K:
            seqs = [torch.cat([x.new_zeros((B, K - T, *x.shape[2:])), x], dim=1) for x in seqs]
        states, actions, returns_to_go, timesteps, attention_mask = seqs
        out = self(returns_to_go, states, actions, timesteps, attention_mask)[:, -1]  # (B, A) or (B, n)
        if self.discrete:
            out = out.argmax(dim=-1)  # (B,)
        return out[0] if single else out


class MLPPolicy(nn.Module):
    """Behaviour cloning policy: an MLP from the (normalised) current state to the action.

    state s_t (…, S) → Linear-ReLU-Dropout × n_layer → tanh head rescaled to [low, high] (…, A), or
    logits (…, n) when discrete. `get_action` takes the same histories as the Decision Transformer's
    and reads only the last state, so evaluation treats both alike (context_len = 1).
    """

    context_len = 1
    max_ep_len = 2**31 - 1  # reads no timesteps

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        hidden_size: int = 256,
        n_layer: int = 2,
        dropout: float = 0.1,
        action_head: Literal["tanh", "categorical"] = "tanh",
        action_low=None,
        action_high=None,
        state_mean=None,
        state_std=None,
    ) -> None:
        super().__init__()
        for name, value in (("state_dim", state_dim), ("action_dim", action_dim), ("hidden_size", hidden_size),
                            ("n_layer", n_layer)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MLPPolicy: {name} must be an int >= 1 (got {value!r})")
        if action_head not in ACTION_HEADS:
            raise ValueError(f"MLPPolicy: action_head must be one of {ACTION_HEADS} (got {action_head!r})")
        if not 0 <= dropout < 1:
            raise ValueError(f"MLPPolicy: dropout must be in [0, 1) (got {dropout})")
        self.kwargs = dict(state_dim=state_dim, action_dim=action_dim, hidden_size=hidden_size, n_layer=n_layer,
                           dropout=dropout, action_head=action_head)
        self.state_dim, self.action_dim = state_dim, action_dim
        self.discrete = action_head == "categorical"
        layers: list[nn.Module] = []
        width = state_dim
        for _ in range(n_layer):
            layers += [nn.Linear(width, hidden_size), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden_size
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, action_dim) if self.discrete else TanhHead(width, action_dim)
        self.register_buffer("state_mean", _as_buffer(state_mean, state_dim, 0.0, "state_mean"))
        self.register_buffer("state_std", _as_buffer(state_std, state_dim, 1.0, "state_std"))
        self.register_buffer("action_low", _as_buffer(action_low, action_dim, -1.0, "action_low"))
        self.register_buffer("action_high", _as_buffer(action_high, action_dim, 1.0, "action_high"))
        if not self.discrete and not bool((self.action_high > self.action_low).all()):
            raise ValueError("MLPPolicy: action_high must be > action_low in every dimension")

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Raw states (…, S) → actions (…, A) (logits (…, n) when discrete)."""
        if states.shape[-1] != self.state_dim:
            raise ValueError(f"MLPPolicy: states must end in {self.state_dim} features (got {tuple(states.shape)})")
        h = self.body((states - self.state_mean) / self.state_std)  # (…, hidden)
        if self.discrete:
            return self.head(h)  # (…, n)
        return self.head(h, self.action_low, self.action_high)  # (…, A)

    @torch.no_grad()
    def get_action(self, states, actions=None, returns_to_go=None, timesteps=None, attention_mask=None) -> torch.Tensor:
        """The deterministic action for the last state of a (T, S) or (B, T, S) history."""
        out = self(states[..., -1, :])  # (A,) or (B, A)
        return out.argmax(dim=-1) if self.discrete else out


