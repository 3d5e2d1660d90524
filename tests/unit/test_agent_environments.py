"""Environments in TRL's ``environment_factory`` shape: one instance per episode from a reused pool, reset
on its row, its public methods the tools, its ``get_reward`` a reward; every misuse a ValueError that
names the environment and the row."""

from __future__ import annotations

import pytest

from seqrl.agents import AgentError, AgentTools, EnvironmentPool, GymAdapter, environment_tools
from seqrl.agents.environments import EnvironmentReward, reset_arguments
from seqrl.agents.envs import environment_class
from seqrl.agents.envs.guess import GuessEnv
from seqrl.agents.tools import ToolCall
from seqrl.rewards.combine import score_completions
from seqrl.rewards.user import UserReward
from seqrl.types import Problem, RewardResult


class Counter:
    built = 0

    def __init__(self):
        Counter.built += 1
        self.n = 0
        self.done = False

    def reset(self, start: int = 0) -> str:
        self.n = start
        return f" (start at {start})"

    def bump(self, by: int) -> int:
        """Add to the counter.

        Args:
            by: How much.
        """
        self.n += by
        return self.n

    def get_reward(self) -> float:
        return float(self.n)

    def _private(self):  # not a tool
        return 0

    @property
    def boom(self):  # read on the class: never evaluated
        raise AssertionError("a property was evaluated")


def rows(*starts):
    return [Problem(f"count {s}", "", metadata={"start": s}, uid=f"r{s}") for s in starts]


def test_public_methods_are_the_tools_and_the_pool_is_reused():
    env = Counter()
    assert [f.__name__ for f in environment_tools(env)] == ["bump"]
    Counter.built = 0
    agent = AgentTools(environments=Counter)
    boxes, envs, added = agent.prepare(rows(1, 2), n=2)
    assert Counter.built == 4 and len({id(e) for e in envs}) == 4  # one instance per episode
    assert added == [" (start at 1)", " (start at 2)"] and [e.n for e in envs] == [1, 1, 2, 2]
    assert boxes[0].call(ToolCall("bump", {"by": 3})).content == "4" and envs[0].n == 4 and envs[1].n == 1
    agent.prepare(rows(5), n=2)
    assert Counter.built == 4  # reused, not rebuilt: reset again
    assert set(agent.rewards()) == {"Counter"}


def test_reset_gets_the_rows_fields_it_names():
    p = Problem("q", "42", metadata={"seed": 3, "environment": "x"}, messages=({"role": "user", "content": "q"},))
    assert reset_arguments(lambda seed: None, p) == {"seed": 3}
    assert reset_arguments(lambda **kw: None, p) == {"prompt": [{"role": "user", "content": "q"}], "answer": "42",
                                                      "seed": 3}


class NoReset:
    def act(self, x: int) -> int:
        """Act.

        Args:
            x: A number.
        """
        return x


class Fails(Counter):
    def reset(self, start: int = 0) -> str:
        if start == 7:
            raise KeyError("no such level")
        return "ok"


class Random(Counter):
    k = 0

    def reset(self, **_) -> str:
        Random.k += 1
        return f"level {Random.k}"


class Clash(Counter):
    def add(self, a: int) -> int:
        """Add.

        Args:
            a: A number.
        """
        return a


def add(a: int) -> int:
    """Add.

    Args:
        a: A number.
    """
    return a


def test_misuse_is_a_clear_error_naming_the_environment_and_the_row():
    with pytest.raises(ValueError, match="NoReset has no reset"):
        AgentTools(environments=NoReset)
    with pytest.raises(ValueError, match="building an instance failed: RuntimeError: down"):
        AgentTools(environments=lambda: (_ for _ in ()).throw(RuntimeError("down")))
    with pytest.raises(AgentError, match=r"reset failed on row 'r7': KeyError"):  # one line from the CLI
        AgentTools(environments=Fails).prepare(rows(1, 7), n=1)
    with pytest.raises(ValueError, match="different texts to the 2 episodes of row 'r1'"):
        AgentTools(environments=Random).prepare(rows(1), n=2)
    with pytest.raises(ValueError, match="Clash: Toolbox: two tools named 'add'"):
        AgentTools([add], environments=Clash)
    two = AgentTools(environments={"count": Counter, "guess": GuessEnv})
    with pytest.raises(ValueError, match=r"row 'r1': environment=None is not one of the environments"):
        two.prepare(rows(1), n=1)
    boxes, envs, _ = two.prepare([Problem("p", "", metadata={"environment": "guess", "seed": 1}, uid="g")], n=1)
    assert isinstance(envs[0], GuessEnv) and list(boxes[0].tools) == ["guess"]
    with pytest.raises(ValueError, match="neither a built-in environment"):
        environment_class("nope")
    assert environment_class("guess") is GuessEnv


def test_the_guess_game_plays_to_its_reward():
    env = GuessEnv()
    env.reset(seed=11)
    lo, hi, said = 1, 100, ""
    while not env.done:
        mid = (lo + hi) // 2
        said = env.guess(mid)
        lo, hi = (mid + 1, hi) if said.startswith("Higher") else (lo, mid - 1) if said.startswith("Lower") else (lo, hi)
    assert said.startswith("Correct") and env.get_reward() == pytest.approx(1 - (env.guesses - 1) / 7)
    assert env.guess(1) == "The game is over."
    other = GuessEnv()
    other.reset(seed=11)
    assert other.target == env.target  # one row, one game, for every episode of its group


def test_rewards_over_episodes_read_the_environments_and_the_trajectories():
    envs = [Counter(), Counter()]
    envs[0].n, envs[1].n = 2, 5
    seen = {}

    def trl_style(completions, environments, trajectories, **kwargs):
        seen["t"] = trajectories
        return [float(len(t)) for t in trajectories]

    fns = {"Counter": (EnvironmentReward("Counter"), 1.0), "trl": (UserReward(trl_style, "trl"), 0.5),
           "plain": (lambda problems, completions: [RewardResult(1.0)] * len(completions), 1.0)}
    traj = [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}, {"role": "tool"}]]
    scored = score_completions(fns, rows(1, 2), ["a", "b"], None, True,
                               {"environments": envs, "trajectories": traj})
    assert scored.scores["Counter"] == [2.0, 5.0] and scored.scores["trl"] == [1.0, 2.0]
    assert scored.total == [2.0 + 0.5 + 1.0, 5.0 + 1.0 + 1.0] and seen["t"] == traj


class Word:
    """A Gymnasium-style text environment: say the hidden word."""

    def reset(self, seed=None):
        self.word = ["apple", "pear"][seed % 2]
        return f"first letter {self.word[0]}", {}

    def step(self, action):
        right = action == self.word
        return ("right" if right else "wrong"), float(right), right, False, {}


def test_a_gymnasium_style_environment_works_through_the_adapter():
    agent = AgentTools(environments=GymAdapter.factory(Word))
    boxes, envs, added = agent.prepare([Problem("say it", "", metadata={"seed": 1}, uid="w")], n=1)
    assert added == ["first letter p"] and list(boxes[0].tools) == ["step"]
    assert boxes[0].call(ToolCall("step", {"action": "apple"})).content == "wrong" and not envs[0].done
    assert boxes[0].call(ToolCall("step", {"action": "pear"})).content == "right" and envs[0].done
    assert envs[0].get_reward() == 1.0 and set(agent.rewards()) == {"GymAdapter"}


def test_seqrl_env_lists_the_environments_and_plays_one_from_the_terminal(monkeypatch, capsys):
    from seqrl.cli import main

    assert main(["env", "ls"]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == ["guess", "python", "code_repair"]
    target = GuessEnv()
    target.reset(seed=3)
    turns = iter([f'<tool_call>{{"name": "guess", "arguments": {{"number": {target.target - 1}}}}}</tool_call>',
                  '<tool_call>{"name": "guess", "arguments": {"number": "x"}}</tool_call>',
                  f'<tool_call>{{"name": "guess", "arguments": {{"number": {target.target}}}}}</tool_call>',
                  "never read"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(turns))
    assert main(["env", "play", "guess", "--field", "seed=3"]) == 0
    out = capsys.readouterr().out
    assert "thinking of a whole number" in out and f"Higher than {target.target - 1}" in out
    assert "error: bad_arguments" in out and "episode over (done): 3 turns, 3 calls, reward 0.857143" in out  # the refused call is no guess
    assert next(turns) == "never read"
    turns = iter(["[[guess 50]]", "I stop here."])
    assert main(["env", "play", "guess", "--field", "seed=3", "--syntax", "compact"]) == 0
    out = capsys.readouterr().out
    assert "Call: [[name arg ...]]" in out and "than 50." in out and "episode over (answer): 2 turns, 1 calls" in out
    assert main(["env", "play", "nope"]) == 2
    assert "neither a built-in environment" in capsys.readouterr().err


def test_a_config_names_its_environment():
    from seqrl.algos.config import AgentConfig
    from seqrl.training.sampled import build_agent_tools

    with pytest.raises(ValueError, match=r"agent.env: 'nope' is neither a built-in environment"):
        AgentConfig(env="nope")
    agent = build_agent_tools(AgentConfig(env="guess", tool_timeout_s=3))
    assert isinstance(agent.pool.pools[None][0], GuessEnv) and agent.shared.timeout_s == 3
    assert build_agent_tools(AgentConfig()) is None


class Slow:
    def reset(self, **_) -> None:
        return None

    def wait(self, seconds: float) -> str:
        """Wait.

        Args:
            seconds: How long.
        """
        import time

        time.sleep(seconds)
        return "waited"


def test_a_call_abandoned_past_its_timeout_ends_its_episode_and_its_instance_leaves_the_pool():
    from seqrl.agents.rollout import Sampled, multi_turn_rollout
    from seqrl.rollout import SamplingParams

    class Tok:  # characters as tokens: enough for a scripted rollout
        chat_template = None

        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(i) for i in ids)

    class Pol:
        tokenizer, max_seq_len = Tok(), 10_000

    waits = iter([0.0, 2.0])

    def sampler(contexts, max_new, seed):
        text = f'<tool_call>{{"name": "wait", "arguments": {{"seconds": {next(waits)}}}}}</tool_call>'
        return [Sampled([ord(c) for c in text], [0.0] * len(text), "stop_string") for _ in contexts]

    agent = AgentTools(environments=Slow, timeout_s=0.5)
    boxes, envs, _ = agent.prepare(rows(1), 1)
    first = envs[0]
    (e,) = multi_turn_rollout(Pol(), [[1, 2]], boxes, SamplingParams(), max_turns=4, sampler=sampler, envs=envs)
    for ep, env in zip([e], envs):
        ep.env = env
    agent.release([e])
    assert e.end == "tool_timeout" and e.errors["timeout"] == 1 and e.turns == 2
    _, again, _ = agent.prepare(rows(1), 1)
    assert again[0] is not first and first in agent.pool.discarded  # a fresh instance; the old one closed at the end


def test_an_environment_that_needs_longer_calls_refuses_a_short_timeout():
    from seqrl.agents.envs.code_repair import CodeRepairEnv

    with pytest.raises(AgentError, match=r"a tool call may take up to 90 s; agent.tool_timeout_s is 10"):
        AgentTools(environments=CodeRepairEnv, timeout_s=10)


def test_a_trl_reward_over_environments_is_checked_with_the_episode_keywords():
    def env_score(environments, **kwargs):
        return [float(e.n) for e in environments]

    fn = UserReward(env_score, "env_score")
    assert fn.form == "trl"
    fn.check_columns(rows(1), episodes=True)
    with pytest.raises(ValueError, match="requires 'environments'"):
        fn.check_columns(rows(1))
    envs = [Counter(), Counter()]
    envs[1].n = 3
    assert [r.score for r in fn(rows(1, 2), ["a", "b"], environments=envs, trajectories=[[], []])] == [0.0, 3.0]

