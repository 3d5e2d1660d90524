"""Monte Carlo tree search over reasoning steps.

Nodes are partial solutions, edges are steps sampled by the policy. One simulation per problem per
round (all problems in lockstep, so each round is one stepper call and one scorer call):

1. **select** from the root by PUCT (prior = softmax of the sibling steps' mean token log-probs,
   `c_init` 1.25, `c_base` 19652) or UCT (constant `c`) until an unexpanded leaf, skipping exhausted
   children — terminal ones, and those whose every child is exhausted (as rStar does: a simulation
   never re-walks a finished solution without growing the tree); a problem whose whole tree is
   exhausted stops spending simulations;
2. **expand** a leaf with `width` sampled steps (identical steps merged);
3. **evaluate** each new child once: its partial solution scored by the scorer (``value: prm``), or a
   rollout from it to the end of the solution scored by the scorer (``value: rollout``);
4. **back up** the mean: each node's Q is the mean of the values evaluated below it.

The final pick is among the terminal nodes found, by the best-of-N rules (weighted vote by default),
or ``visits``: the most visited path, finished by one rollout if it ends unfinished. The gold answer
is never used; ``oracle=True`` values terminal nodes with the task's verifier instead of the scorer,
for generating training data only, and the result says so (`SearchResult.oracle`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from seqrl.core.search import AGGREGATIONS, puct_score, softmax_priors, uct_score
from seqrl.search.best_of_n import SELECT, Account, Scorer, choose, scored_solutions
from seqrl.search.steps import Stepper
from seqrl.search.tree import Beam, SearchResult, _expand
from seqrl.types import Problem, Task, extract_answer


@dataclass(eq=False)
class Node:
    text: str
    parent: Node | None = None
    prior: float = 1.0
    value0: float = 0.0
    """The node's own evaluation (scorer, rollout or oracle)."""
    visits: int = 0
    total: float = 0.0
    terminal: bool = False
    depth: int = 0
    children: list[Node] = field(default_factory=list)

    @property
    def q(self) -> float:
        return self.total / self.visits if self.visits else self.value0


def _pick_child(node: Node, rule: str, c: float, c_init: float, c_base: float) -> Node:
    """The child to descend into by `rule`, among those with something left to expand."""
    kids = [ch for ch in node.children if not _exhausted(ch)]
    if rule == "puct":
        keyed = [puct_score(ch.q, ch.prior, node.visits, ch.visits, c_init, c_base) for ch in kids]
    else:
        keyed = [uct_score(ch.q, node.visits, ch.visits, c) for ch in kids]
    best = max(range(len(keyed)), key=lambda k: (keyed[k], -k))  # ties: the earlier child
    return kids[best]


def _exhausted(node: Node) -> bool:
    """Nothing left to expand below `node`: it is terminal, or every child is exhausted (rStar skips
    these in selection, so no simulation re-walks a finished solution without growing the tree)."""
    return node.terminal or (bool(node.children) and all(_exhausted(ch) for ch in node.children))


def _terminals(node: Node) -> list[Node]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.terminal:
            out.append(n)
        stack.extend(reversed(n.children))
    return out


def mcts(problems: Sequence[Problem], stepper: Stepper, scorer: Scorer, simulations: int = 16, width: int = 4,
         rule: str = "puct", c: float = 1.0, c_init: float = 1.25, c_base: float = 19652.0, value: str = "prm",
         max_depth: int = 12, aggregation: str = "last", select: str = "weighted", task: Task | None = None,
         oracle: bool = False) -> SearchResult:
    """MCTS with `simulations` rounds per problem (see the module docstring)."""
    if rule not in ("puct", "uct") or value not in ("prm", "rollout"):
        raise ValueError(f"rule must be puct or uct and value prm or rollout (got {rule!r}, {value!r})")
    if simulations < 1 or width < 1 or max_depth < 1:
        raise ValueError(f"simulations, width and max_depth must be >= 1 (got {simulations}, {width}, {max_depth})")
    if aggregation not in AGGREGATIONS or select not in (*SELECT, "visits"):
        raise ValueError(f"aggregation must be one of {AGGREGATIONS} and select one of {(*SELECT, 'visits')}")
    if oracle and task is None:
        raise ValueError("oracle=True needs the task (its verifier values terminal nodes)")
    problems = list(problems)
    account = Account()
    t0 = time.perf_counter()
    roots = [Node("") for _ in problems]
    for _ in range(simulations):
        leaves: list[tuple[int, Node, list[Node]]] = []
        for i, root in enumerate(roots):
            if _exhausted(root):  # every solution this tree can hold is found: its simulations end
                continue
            node, path = root, [root]
            while node.children:
                node = _pick_child(node, rule, c, c_init, c_base)
                path.append(node)
            leaves.append((i, node, path))
        if not leaves:
            break
        options = _expand(stepper, [problems[i] for i, _, _ in leaves], [n.text for _, n, _ in leaves], width, account)
        new: list[tuple[int, Node, list[Node]]] = []
        for (i, node, path), steps in zip(leaves, options):
            unique = {}
            for step in steps:
                unique.setdefault(step.text, step)  # identical steps merged
            priors = softmax_priors([s.mean_logprob for s in unique.values()])
            for step, prior in zip(unique.values(), priors):
                child = Node(node.text + step.text, node, prior, terminal=step.terminal or node.depth + 1 >= max_depth,
                             depth=node.depth + 1)
                node.children.append(child)
                new.append((i, child, path))
        _evaluate(new, problems, stepper, scorer, value, aggregation, task, oracle, account)
        for _, child, path in new:
            child.visits, child.total = 1, child.value0
            for n in path:
                n.visits += 1
                n.total += child.value0
    pools: list[list[Beam]] = []
    chosen: list[str] = []
    for i, root in enumerate(roots):
        pool = [Beam(n.text, n.value0, True) for n in _terminals(root)]
        if select == "visits" or not pool:
            node = root
            while node.children:
                node = max(node.children, key=lambda ch: ch.visits)
            text = node.text
            if not node.terminal:
                t = time.perf_counter()
                before = stepper.generated_tokens
                text = stepper.finish([problems[i]], [node.text])[0]
                account.generated_tokens += stepper.generated_tokens - before
                account.gen_s += time.perf_counter() - t
            pools.append(pool or [Beam(text, node.q, False)])
            chosen.append(text)
            continue
        answers = [task.extract_answer(b.text) if task is not None else extract_answer(b.text) for b in pool]
        pools.append(pool)
        chosen.append(pool[choose(answers, [b.score for b in pool], select)].text)
    correct = None if task is None else [task.verify(p, s).correct for p, s in zip(problems, chosen)]
    account.total_s = time.perf_counter() - t0
    account.other_s = max(0.0, account.total_s - account.gen_s - account.score_s)
    result = SearchResult(chosen, pools, correct, account, simulations, oracle=oracle)
    result.stats["nodes"] = float(sum(_count(r) for r in roots))
    return result


def _count(node: Node) -> int:
    return 1 + sum(_count(ch) for ch in node.children)


def _evaluate(new, problems, stepper, scorer, value, aggregation, task, oracle, account) -> None:
    """Set `value0` of every new node: the scorer on its partial solution, or on a rollout to the end;
    terminal nodes by the verifier in oracle mode."""
    texts = [n.text for _, n, _ in new]
    if value == "rollout":
        open_rows = [r for r, (_, n, _) in enumerate(new) if not n.terminal]
        if open_rows:
            t = time.perf_counter()
            before = stepper.generated_tokens
            done = stepper.finish([problems[new[r][0]] for r in open_rows], [texts[r] for r in open_rows])
            account.generated_tokens += stepper.generated_tokens - before
            account.gen_s += time.perf_counter() - t
            for r, text in zip(open_rows, done):
                texts[r] = text
    rows = [r for r, (_, n, _) in enumerate(new) if not (oracle and n.terminal)]
    values = scored_solutions(scorer, [problems[new[r][0]] for r in rows], [texts[r] for r in rows], aggregation, account)
    for r, v in zip(rows, values):
        new[r][1].value0 = v
    if oracle:
        for i, node, _ in new:
            if node.terminal:
                node.value0 = float(task.verify(problems[i], node.text).correct)
