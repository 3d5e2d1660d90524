"""One comparison of a final answer with a gold answer, shared by the math reward and the task verifiers.

`compare_answers(gold, pred)` returns ``(equal, reason)``. Rules, in order (docs/rewards.md,
"Verdict rules"):

1. **Normalise**: superscript/subscript digits as ``^{…}``/``_{…}``, Unicode NFKC (full-width digits
   → ASCII), U+2212 and other dashes → ``-``, ``$`` and a trailing period dropped, spaces trimmed.
2. **Guards** before any parsing: at most `MAX_ANSWER_CHARS` characters, brace/paren nesting at
   most `MAX_NESTING`, no exponent tower (an exponent inside an exponent), no integer literal above
   `MAX_EXPONENT` in an exponent, a factorial or a binomial, and no product of exponents above it, no exponent above `MAX_GROUP_EXPONENT` on a bracketed base,
   at most `MAX_EXPANDED_TERMS` monomials multiplied out, ``\\Gamma`` only of a small literal or a
   symbolic argument, ``\\frac``/``\\sqrt`` nested at most `MAX_COMMAND_NESTING` deep, no integer above
   `MAX_SYMBOLIC_SUM_INT` in a sum or product over a symbolic bound. A sum or product must read as
   ``_{index=lower}``, ``^{upper}`` and a body (`sum_shape`), else the answer is unparseable.
3. **Hedges** score 0 unless the gold answer has the same form: ``or``/``\\lor``/``\\vee``,
   ``\\pm``/``\\mp``/``±``, ``\\neq``/``≠``, negations (``not``, ``\\neg``), sets (``\\{…\\}``),
   several values (a comma or ``;`` outside a valid thousands group, ``and``).
4. **Equations**: ``variable = answer`` compares ``answer``; any other equation (``3=5``) scores 0
   unless the gold is an equation too. An ``=`` inside braces (``\\sum_{k=1}``) is no equation sign.
5. **Percent**: a trailing ``%`` / ``\\%`` is a unit label, dropped from both sides: ``50\\%``
   equals 50 (and not 0.5), ``5000\\%`` does not equal 50 (it would as a fraction, 5000/100).
   Gold answers of percentage questions are written in percent, as the question asks.
6. **Plain numbers** (integers, decimals, ``a/b``, thousands groups ``1,234``) compare exactly as
   fractions. A LaTeX fraction of integers (``\\frac{1}{2}``, ``-\\dfrac{3}{4}``, ``\\frac12``) against a
   number is decided without math-verify where math-verify's answer is certain: equal when the exact
   values are equal; not equal when they differ by more than `NUMERIC_GAP` and both are below
   `NUMERIC_MAX` (math-verify rounds floats to 6 decimals, with 15 significant digits). Otherwise
   math-verify decides, ``verify(parse(gold), parse(pred))``, the bound symbols of each parse (a sum's
   index) renamed canonically so ``\\sum_{k=1}^{n} k`` is ``\\sum_{i=1}^{n} i``, with its signal timeouts off (they only
   work in the main thread) and ``raise_on_error=True`` so its errors become the reason instead of
   log lines on stderr. Importing it (sympy) takes about a second, so the shortcuts matter for the
   one-shot ``seqrl reward math`` command.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction
from typing import Literal

from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, extract_answer

MAX_ANSWER_CHARS = 500
"""Longer answers are not parsed (math-verify's parser slows with size)."""
MAX_NESTING = 12
"""Deeper ``{``/``(``/``[`` nesting is refused before parsing (sympy recursion, parse time)."""
MAX_EXPONENT = 1000
"""Largest integer literal allowed in an exponent, a factorial or a binomial."""
MAX_GROUP_EXPONENT = 6
"""Largest exponent on a bracketed base: sympy expands ``(a+b+c)^{30}`` (5 s) and ``(a+b+c+d+e)^{12}`` (13 s)."""
MAX_EXPANDED_TERMS = 100
"""Most monomials an answer may multiply out to (`expanded_terms`): ≈ 3 ms each in sympy, so
``(a+…+h)^{6}`` (1716) takes 5 s and ``(a+…+j)^{6}`` (5005) 13 s; ``(a+b+c+d)^{6}`` is 84."""
MAX_SYMBOLIC_SUM_INT = 100
"""Largest integer in a sum or product over a symbolic bound: sympy's closed form of Σ k^{200} takes 2.6 s."""
MAX_COMMAND_NESTING = 6
"""Deepest nesting of ``\\frac``/``\\sqrt``-like commands (a continued fraction 11 deep parses for ≈ 0.6 s)."""

NUMERIC_GAP = Fraction(1, 10**5)
"""Exact values further apart than this are unequal for math-verify too (it rounds floats to 6 decimals)."""
NUMERIC_MAX = 10**8
"""…as long as both are smaller than this in magnitude (15 significant digits leave 7 decimals)."""

_DASHES = dict.fromkeys(map(ord, "\u2212\u2012\u2013\u2014\ufe63\uff0d"), "-")
_NUMBER_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")
_FRACTION_RE = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_LATEX_FRACTION_RE = re.compile(
    r"([+-]?)\s*\\[dt]?frac\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))")
_PERCENT_RE = re.compile(r"\s*\\?%$")
_VARIABLE_RE = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?")
_HEDGES = (
    (re.compile(r"\bor\b|\\lor\b|\\vee\b|∨", re.I), "or"),
    (re.compile(r"\\pm\b|\\mp\b|±|∓"), "\\pm"),
    (re.compile(r"\\neq?\b|≠|\\not\b|!="), "\\neq"),
    (re.compile(r"\bnot\b|\\neg\b|\\lnot\b|¬", re.I), "negation"),
    (re.compile(r"\\\{|\\lbrace\b|\\set\b"), "set"),
    (re.compile(r"\band\b|\\land\b|\\wedge\b|;", re.I), "several values"),
)
_LIST_COMMA_RE = re.compile(r"(?<!\d),|,(?!\d{3}(?!\d))|(?<=\d{4}),")
_EXPONENT_RE = re.compile(r"(?:\^|\*\*)\s*(\{[^{}]*\}|\d+)")
_BIG_ARG_RE = re.compile(r"(?:\\binom|\\dbinom|\\tbinom|\\choose)\s*\{?[^}]*?(\d+)|(\d+)\s*!")
_INT_RE = re.compile(r"\d+")
_GAMMA_RE = re.compile(r"\\Gamma(?![A-Za-z])|\\operatorname\s*\{\s*(?:Gamma|gamma|factorial)\s*\}")
_NESTING_COMMAND_RE = re.compile(r"\\(?:[dt]?frac|sqrt|binom|dbinom|tbinom)(?![A-Za-z])")
_SUM_RE = re.compile(r"\\(?:sum|prod)(?![A-Za-z])")
_LIMITS_RE = re.compile(r"\\(?:no)?limits(?![A-Za-z])")
_SUPERSCRIPT_CHARS, _SUBSCRIPT_CHARS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "₀₁₂₃₄₅₆₇₈₉₊₋"
_SUPERSCRIPTS = dict(zip(map(ord, _SUPERSCRIPT_CHARS), "0123456789+-"))
_SUBSCRIPTS = dict(zip(map(ord, _SUBSCRIPT_CHARS), "0123456789+-"))
_SUPERSCRIPT_RUN_RE = re.compile(f"[{_SUPERSCRIPT_CHARS}]+")
_SUBSCRIPT_RUN_RE = re.compile(f"[{_SUBSCRIPT_CHARS}]+")


def verdict(gold: str, answer: str, max_chars: int = MAX_ANSWER_CHARS):
    """A task verifier's `RewardResult` for an extracted answer: 1.0 when `compare_answers` says
    equal, else 0.0 with ``answer too long``, ``hedged: …``, ``unparseable answer (…)`` or
    ``not equal: <answer> vs <gold>``.

    >>> verdict("132", "132.0").score, verdict("132", "131").reason, verdict("4", "3 or 4").reason
    (1.0, 'not equal: 131 vs 132', 'hedged: or')
    """
    from seqrl.types import RewardResult

    if len(answer) > max_chars:
        return RewardResult(0.0, "answer too long")
    equal, why = compare_answers(gold, answer)
    if equal:
        return RewardResult(1.0)
    if why.startswith("not equivalent"):
        why = f"not equal: {answer[:60]} vs {str(gold)[:60]}"
    elif why.startswith("unparseable answer"):
        why = f"unparseable answer: {answer[:60]}{why[len('unparseable answer'):]}"
    return RewardResult(0.0, why)


def normalise(text: str) -> str:
    """Superscript and subscript digits as ``^{…}``/``_{…}``, then NFKC, one kind of minus, no ``$``, no
    trailing period, no ``\\limits`` (math-verify reads ``\\sum\\limits_{k=1}^{10} k`` as 1), stripped.
    (NFKC alone folds ``2³`` into ``23``.)

    >>> normalise("\u22125"), normalise("\uff11\uff12"), normalise(" $3$. "), normalise("2³"), normalise("x₁₀")
    ('-5', '12', '3', '2^{3}', 'x_{10}')
    """
    text = _SUPERSCRIPT_RUN_RE.sub(lambda m: "^{" + m.group().translate(_SUPERSCRIPTS) + "}", str(text))
    text = _SUBSCRIPT_RUN_RE.sub(lambda m: "_{" + m.group().translate(_SUBSCRIPTS) + "}", text)
    text = unicodedata.normalize("NFKC", text).translate(_DASHES)
    text = _LIMITS_RE.sub("", text.replace("$", "").replace("{,}", ",")).strip()
    return text[:-1].rstrip() if text.endswith(".") else text


def guard(answer: str) -> str:
    """Why `answer` is too costly to parse ("" when it is fine). Linear in the answer.

    >>> guard("10^{3}"), guard("9^{9^{9}}"), guard("(1+x)^{100000}")
    ('', 'exponent tower', 'exponent too large: 100000')
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return f"too long ({len(answer)} chars > {MAX_ANSWER_CHARS})"
    depth = deepest = 0
    for ch in answer:
        if ch in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "})]":
            depth -= 1
    if depth != 0:
        return "unbalanced brackets"
    if deepest > MAX_NESTING:
        return f"nested too deep ({deepest} > {MAX_NESTING})"
    for m in _EXPONENT_RE.finditer(answer):
        rest = answer[m.end():m.end() + 1]
        if rest == "^" or "^" in m.group(1):
            return "exponent tower"
    if re.search(r"\^\s*\{[^}]*\^", answer) or re.search(r"\^[^{]\s*\^|\*\*[^*]*\*\*", answer):
        return "exponent tower"
    power = 1  # exponents multiply through brackets: (10^{999})^{999} is 10^998001
    for m in _EXPONENT_RE.finditer(answer):
        for n in _INT_RE.findall(m.group(1)):
            power *= max(int(n), 1)
            if power > MAX_EXPONENT:
                return f"exponent too large: {n}" if int(n) > MAX_EXPONENT else "exponents too large together"
    group_power = 1  # powers of bracketed bases expand: their exponents multiply too
    for m in _EXPONENT_RE.finditer(answer):
        i = m.start() - 1
        while i >= 0 and answer[i].isspace():
            i -= 1
        if i >= 0 and answer[i] in ")}]" and not _closes_subscript(answer, i):
            for n in _INT_RE.findall(m.group(1)):
                group_power *= max(int(n), 1)
                if group_power > MAX_GROUP_EXPONENT:
                    return f"powers of bracketed expressions above {MAX_GROUP_EXPONENT}"
    if re.search(r"[)}\]]\s*!", answer):
        return "factorial of an expression"
    for m in _BIG_ARG_RE.finditer(answer):
        n = m.group(1) or m.group(2)
        if int(n) > MAX_EXPONENT:
            return f"factorial/binomial too large: {n}"
    if re.search(r"\\(?:binom|dbinom|tbinom|choose|sum|prod|int)", answer) and any(
            int(n) > MAX_EXPONENT for n in _INT_RE.findall(answer)):
        return "sum/product/binomial with a bound too large"
    why = _gamma_guard(answer)
    if why:
        return why
    for m in _SUM_RE.finditer(answer):
        bounds = _sum_bounds(answer, m.end())[0].values()
        if any(re.search(r"[A-Za-z]", re.sub(r"\\infty\b", "", _strip_bound(b))) for b in bounds) and any(
                int(n) > MAX_SYMBOLIC_SUM_INT for n in _INT_RE.findall(answer)):
            return f"sum/product over a symbolic bound with an integer above {MAX_SYMBOLIC_SUM_INT}"
    deepest = _command_nesting(answer)
    if deepest > MAX_COMMAND_NESTING:
        return f"fractions/roots nested too deep ({deepest} > {MAX_COMMAND_NESTING})"
    terms = expanded_terms(answer, MAX_EXPANDED_TERMS)
    if terms > MAX_EXPANDED_TERMS:
        return f"expands to too many terms (over {MAX_EXPANDED_TERMS})"
    return ""


def _sum_bounds(answer: str, at: int) -> tuple[dict[str, str], int]:
    """The ``_`` and ``^`` bounds after a ``\\sum``/``\\prod`` ending at `at` (in either order, ``\\limits``
    skipped, a braced bound whole by brace matching: ``{{n}}`` is ``{n}``) and where they end.

    >>> _sum_bounds("\\\\sum\\\\limits_{k=1}^{{n}} 7", 4), _sum_bounds("\\\\prod^5_{k=1} k", 5)
    (({'_': 'k=1', '^': '{n}'}, 23), ({'^': '5', '_': 'k=1'}, 13))
    """
    bounds: dict[str, str] = {}
    i, n = at, len(answer)
    while len(bounds) < 2:
        while i < n and answer[i].isspace():
            i += 1
        limits = re.match(r"\\(?:no)?limits(?![A-Za-z])", answer[i:])
        if limits:
            i += limits.end()
            continue
        if i >= n or answer[i] not in "_^" or answer[i] in bounds:
            break
        key, i = answer[i], i + 1
        while i < n and answer[i].isspace():
            i += 1
        if i < n and answer[i] == "{":
            arg = _call_argument(answer, i) or ""
            bounds[key] = arg
            i += len(arg) + 2
        elif i < n:
            bounds[key] = answer[i]
            i += 1
    return bounds, min(i, n)


def sum_shape(answer: str) -> str:
    """Why a ``\\sum``/``\\prod`` in `answer` is not ``_{index=lower}``, ``^{upper}`` and a body ("" when
    each is): math-verify reads ``\\sum_{k=1}^{10}`` as 1 and ``\\sum_k k`` as nothing.

    >>> sum_shape("\\\\sum^{n}_{k=1} k"), sum_shape("\\\\sum_{k=1}^{n}"), sum_shape("\\\\sum_k k")
    ('', 'sum/product without a body', 'sum/product without index = lower bound')
    """
    for m in _SUM_RE.finditer(answer):
        bounds, end = _sum_bounds(answer, m.end())
        index, equals, lower = bounds.get("_", "").partition("=")
        if not (equals and _VARIABLE_RE.fullmatch(index.strip()) and lower.strip()):
            return "sum/product without index = lower bound"
        if not bounds.get("^", "").strip(" {}"):
            return "sum/product without an upper bound"
        if not re.sub(r"\\right(?![A-Za-z])\\?", "", _group_rest(answer, end)).strip():
            return "sum/product without a body"
    return ""


def _group_rest(answer: str, at: int) -> str:
    """The text from `at` to the end of its bracket group (the first unmatched closing bracket)."""
    depth = 0
    for j in range(at, len(answer)):
        if answer[j] in "({[":
            depth += 1
        elif answer[j] in ")}]":
            if depth == 0:
                return answer[at:j]
            depth -= 1
    return answer[at:]


def _strip_bound(bound: str) -> str:
    """A sum's bound without braces and its index assignment's left side: ``{k=1}`` → ``1``."""
    bound = bound.strip("{}")
    return bound.split("=", 1)[1] if "=" in bound else bound


def _gamma_guard(answer: str) -> str:
    """Γ(n) is (n−1)!: its argument must be a number up to `MAX_EXPONENT` (``5``, ``0.5``, ``1/2``,
    ``\\frac{1}{2}``), or symbolic (sympy leaves Γ(x) unevaluated) with no power, factorial or Γ inside and
    its integer literals multiplying to at most `MAX_EXPONENT` (``x - x`` could cancel the symbol).

    >>> _gamma_guard("\\\\Gamma\\\\left(\\\\frac{1}{2}\\\\right)"), _gamma_guard("\\\\Gamma(x)^{2}"), _gamma_guard("\\\\Gamma(999)")
    ('', '', '')
    >>> _gamma_guard("\\\\Gamma(9999)"), _gamma_guard("\\\\Gamma(999\\\\cdot 999 + x - x)")
    ('Gamma too large: 9999', 'Gamma of a computed argument')
    """
    for m in _GAMMA_RE.finditer(answer):
        arg = _call_argument(answer, m.end())
        if arg is None:
            return "Gamma without a bracketed argument"
        plain = re.sub(r"\\(?:left|right|[dt]?frac|,|;|!|\s)", " ", arg).replace("{", " ").replace("}", " ")
        plain = plain.strip()
        if re.fullmatch(r"[+-]?\s*\d+(?:\.\d+)?(?:\s*/?\s*\d+)?", plain):  # 5, 0.5, 1/2, \frac{1}{2}
            if any(int(n) > MAX_EXPONENT for n in _INT_RE.findall(plain)):
                return f"Gamma too large: {plain}"
            continue
        product = 1
        for n in _INT_RE.findall(arg):
            product *= max(int(n), 1)
        if (not re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", arg)) or re.search(r"[\^!]", arg)
                or _GAMMA_RE.search(arg) or product > MAX_EXPONENT):
            return "Gamma of a computed argument"
    return ""


def _call_argument(answer: str, at: int) -> str | None:
    """The bracketed argument starting at `at` (spaces and ``\\left`` skipped): ``(…)``, ``{…}`` or ``[…]``
    with nested brackets, else None."""
    i = at
    while i < len(answer) and answer[i].isspace():
        i += 1
    if answer.startswith("\\left", i):
        i += len("\\left")
    if i >= len(answer) or answer[i] not in "({[":
        return None
    depth = 0
    for j in range(i, len(answer)):
        if answer[j] in "({[":
            depth += 1
        elif answer[j] in ")}]":
            depth -= 1
            if depth == 0:
                return answer[i + 1:j]
    return None


def _command_nesting(answer: str) -> int:
    """Deepest nesting of ``\\frac``/``\\sqrt``/``\\binom`` arguments inside each other (each command's
    argument braces found by brace matching, so ``\\frac{\\sqrt{2}}{…}`` counts its denominator too).

    >>> _command_nesting("\\\\frac{1}{2}"), _command_nesting("\\\\frac{\\\\sqrt{2}}{\\\\frac{\\\\sqrt{3}}{2}}"), _command_nesting("\\\\frac12")
    (1, 3, 0)
    """
    close = _matching_braces(answer)
    args: set[int] = set()  # positions of braces that open a command's argument
    for m in _NESTING_COMMAND_RE.finditer(answer):
        i, wanted = m.end(), 1 if m.group().startswith("\\sqrt") else 2
        while i < len(answer) and answer[i].isspace():
            i += 1
        if i < len(answer) and answer[i] == "[":  # \sqrt[3]{…}: the index, then the argument
            end = answer.find("]", i)
            i = end + 1 if end >= 0 else len(answer)
        for _ in range(wanted):
            while i < len(answer) and answer[i].isspace():
                i += 1
            if i >= len(answer) or answer[i] != "{" or i not in close:
                break
            args.add(i)
            i = close[i] + 1
    depth = deepest = 0
    ends: list[int] = []
    for i, ch in enumerate(answer):
        while ends and ends[-1] < i:
            ends.pop()
            depth -= 1
        if i in args:
            depth += 1
            deepest = max(deepest, depth)
            ends.append(close[i])
    return deepest


def _power(exponent: re.Match, cap: int) -> int:
    """The largest integer in an `_EXPONENT_RE` match (1 when it holds none), at most `cap`."""
    return min(int(max(_INT_RE.findall(exponent.group(1)) or ["1"], key=int)), cap)


def expanded_terms(answer: str, limit: int = MAX_EXPANDED_TERMS) -> int:
    """An upper bound on how many monomials `answer` multiplies out to, capped just above `limit`: the
    smaller of two counts. By brackets: a bracket counts the sum over its top-level terms of the product
    of their factors' counts, and a bracket of w terms to the power n counts C(w+n−1, n). By degree:
    v distinct letters to a total degree d have at most C(v+d, d) monomials (``(x-1)(x-2)…(x-7)`` is 8).

    >>> expanded_terms("(x+1)(x-2)"), expanded_terms("(a+b+c+d)^{6}"), expanded_terms("3x^{2}+2x+1")
    (3, 84, 3)
    >>> expanded_terms("(a+b+c+d+e+f+g+h+i+j) ^{6}") > 100, expanded_terms("(x-1)(x-2)(x-3)(x-4)(x-5)(x-6)(x-7)")
    (True, 8)
    """
    from math import comb

    cap = limit + 1
    stack = [[0, 1, 0, 0]]  # per open bracket: [finished terms, current term's count, its degree, max degree]
    letters: set[str] = set()
    i, n = 0, len(answer)
    previous = ""
    while i < n:
        ch = answer[i]
        if ch == "\\":  # a command name is not a product of letters
            j = i + 1
            while j < n and answer[j].isalpha():
                j += 1
            i, previous = j, "\\"
            continue
        if ch in "({[":
            stack.append([0, 1, 0, 0])
        elif ch in ")}]" and len(stack) > 1:
            terms, product, degree, top = stack.pop()
            count, deg = min(terms + product, cap), max(top, degree)
            j = i + 1
            while j < n and answer[j].isspace():
                j += 1
            m = _EXPONENT_RE.match(answer, j)
            if m:
                power = _power(m, cap)
                count = min(comb(count + power - 1, power), cap) if count > 1 else 1
                deg = min(deg * power, cap)
                i = m.end() - 1
            stack[-1][1] = min(stack[-1][1] * count, cap)
            stack[-1][2] = min(stack[-1][2] + deg, cap)
        elif ch in "+-" and previous not in ("", "(", "{", "[", "^", "_", "*", "/", "=") and not (
                previous in "eE" and i >= 2 and answer[i - 2].isdigit()):  # 1.5e-3 is one number
            frame = stack[-1]
            frame[0], frame[1] = min(frame[0] + frame[1], cap), 1
            frame[3], frame[2] = max(frame[3], frame[2]), 0
        elif ch.isalpha():
            letters.add(ch)
            j = i + 1
            while j < n and answer[j].isspace():
                j += 1
            m = _EXPONENT_RE.match(answer, j)  # x^{2}: degree 2
            stack[-1][2] = min(stack[-1][2] + (_power(m, cap) if m else 1), cap)
            if m:
                i = m.end() - 1
        if not ch.isspace():
            previous = ch
        i += 1
    terms, product, degree, top = stack[0]
    by_brackets = min(terms + product, cap)
    d = min(max(top, degree), cap)
    by_degree = min(comb(len(letters) + d, d), cap) if d < cap else cap
    return min(by_brackets, by_degree)


def _closes_subscript(answer: str, close: int) -> bool:
    """Whether the bracket at `close` ends a subscript ``_{…}`` (a bound, as in ``\\sum_{k=1}^{n}``)."""
    depth, i = 0, close
    while i >= 0:
        depth += answer[i] in ")}]"
        depth -= answer[i] in "({["
        if depth == 0:
            return i > 0 and answer[i - 1] == "_"
        i -= 1
    return False


def hedge(answer: str, gold: str) -> str:
    """The hedge `answer` makes that `gold` does not ("" when none).

    >>> hedge("3 or 4", "4"), hedge("\\\\pm 2", "\\\\pm 2"), hedge("1,234", "1234"), hedge("3,4", "34")
    ('or', '', '', 'several values')
    """
    for pattern, name in _HEDGES:
        if pattern.search(answer) and not pattern.search(gold):
            return name
    if _LIST_COMMA_RE.search(answer) and not _LIST_COMMA_RE.search(gold):
        return "several values"
    return ""


def _strip_percent(text: str) -> str:
    return _PERCENT_RE.sub("", text)


def _strip_text(text: str) -> str:
    r"""``\text{5}`` → ``5`` (also ``\mathrm``, ``\textbf``, ``\mbox``) when the content is a plain number."""
    return re.sub(r"\\(?:text|textbf|mathrm|mbox|mathbf)\s*\{\s*([0-9.,/+-]+)\s*\}", r"\1", text)


def plain_number(text: str) -> Fraction | None:
    """The exact value of a plain number (``12``, ``-0.5``, ``1,234``, ``3/4``), else None.

    >>> plain_number("1,234"), plain_number("3,4"), plain_number("-3/4")
    (Fraction(1234, 1), None, Fraction(-3, 4))
    """
    text = text.strip().replace("{,}", ",")
    if _NUMBER_RE.fullmatch(text):
        return Fraction(text.replace(",", ""))
    m = _FRACTION_RE.fullmatch(text)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2)))
    return None


def latex_fraction(text: str) -> Fraction | None:
    r"""The exact value of ``\frac{a}{b}`` (also ``\dfrac``, ``\tfrac``, ``\frac12``, a sign before) with
    integers a, b ≠ 0, else None.

    >>> latex_fraction("\\frac{1}{2}"), latex_fraction("-\\dfrac{6}{4}"), latex_fraction("\\frac12"), latex_fraction("\\frac{x}{2}")
    (Fraction(1, 2), Fraction(-3, 2), Fraction(1, 2), None)
    """
    m = _LATEX_FRACTION_RE.fullmatch(text.strip())
    if not m:
        return None
    num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
    if den == 0:
        return None
    return Fraction(-num if m.group(1) == "-" else num, den)


def _equation_side(answer: str, gold: str) -> tuple[str | None, str]:
    """``x = 5`` → ``5``; (None, reason) for an equation that is not ``variable = answer``."""
    signs = _equation_signs(answer)
    if not signs or _equation_signs(gold):
        return answer, ""
    lhs, rhs = answer[:signs[0]], answer[signs[0] + 1:]
    if len(signs) > 1 or not _VARIABLE_RE.fullmatch(lhs.strip()) or not rhs.strip():
        return None, "equation that is not variable = answer"
    return rhs.strip(), ""


def _equation_signs(text: str) -> list[int]:
    """Positions of the ``=`` outside braces: ``\\sum_{k=1}^{n} k`` assigns an index, it is no equation.

    >>> _equation_signs("x = 5"), _equation_signs("\\\\sum_{k=1}^{n} k"), _equation_signs("S = \\\\sum_{k=1}^{n} k")
    ([2], [], [2])
    """
    signs, depth, i = [], 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # \{ and \} are no braces
            i += 2
            continue
        depth += (ch == "{") - (ch == "}")
        if ch == "=" and depth == 0:
            signs.append(i)
        i += 1
    return signs


def _math_verify():
    """math-verify's parse and verify, with its one-time "timeout is disabled" warning marked as
    shown: the time limit is the caller's (a per-call limit around every reward), not a signal."""
    import math_verify.grader
    import math_verify.parser

    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    return math_verify.parse, math_verify.verify


def _parse(answer: str):
    """math-verify's parse (``$…$`` first, then bare), bound symbols renamed canonically; empty unless a
    sympy object came out, and one holding a sum/product where the answer writes one."""
    from sympy import Product, Sum

    parse, _ = _math_verify()
    candidates = [f"${answer}$", answer]
    for candidate in candidates:
        parsed = parse(candidate, parsing_timeout=None, raise_on_error=True)
        exprs = [p for p in parsed if not isinstance(p, str)]
        if exprs and (not _SUM_RE.search(answer) or any(_holds(p, Sum, Product) for p in exprs)):
            return [p if isinstance(p, str) else _canonical_bound_symbols(p) for p in parsed]
    return []


def _holds(expr, *types) -> bool:
    try:
        return bool(expr.has(*types))
    except (AttributeError, TypeError):  # a matrix or a Python object without `has`
        return False


def _with_gold_symbols(parsed: list, gold_parsed: list) -> list:
    """`parsed` with each free symbol that has a gold symbol's name but other assumptions replaced by the
    gold's: math-verify makes every symbol of an answer that writes ``i`` complex (the index of
    ``\\sum_{i=1}^{n} i`` too), and a complex ``n`` is not the gold's real ``n``."""
    from sympy import Basic, Symbol

    gold = {s.name: s for g in gold_parsed if isinstance(g, Basic) for s in g.free_symbols if isinstance(s, Symbol)}
    return [p.xreplace({s: gold[s.name] for s in p.free_symbols if isinstance(s, Symbol) and gold.get(s.name, s) != s})
            if isinstance(p, Basic) else p for p in parsed]


def _canonical_bound_symbols(expr):
    """`expr` with each bound symbol (a sum's index) renamed by its place: sympy's Dummies differ
    across calls, so they become Symbols named as the Dummies (``_0``: no LaTeX symbol is named so)."""
    from sympy import Basic, Dummy, Symbol

    if not isinstance(expr, Basic):
        return expr
    try:
        canonical = expr.as_dummy()
        return canonical.xreplace({d: Symbol(d.name) for d in canonical.atoms(Dummy)})
    except (TypeError, ValueError, AttributeError):  # an object sympy cannot rebuild stays as parsed
        return expr


_WORD_RE = re.compile(r"[^\W\d_]{2,}(?:[ '-][^\W\d_]+)*")  # "Paris", "New York": text, not maths


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def compare_answers(gold: str, pred: str) -> tuple[bool, str]:
    """``(equal, reason)``: whether `pred` states the gold answer (rules in the module docstring).

    >>> compare_answers("5", "\\\\sqrt{25}"), compare_answers("5", "3=5"), compare_answers("4", "x = 4")
    ((True, ''), (False, 'equation that is not variable = answer'), (True, ''))
    >>> compare_answers("50", "5000\\\\%")[0], compare_answers("50", "50\\\\%")[0], compare_answers("4", "3 or 4")
    (False, True, (False, 'hedged: or'))
    """
    gold, pred = normalise(gold), normalise(pred)
    if not pred:
        return False, "empty answer"
    why = guard(pred) or sum_shape(pred)
    if why:
        return False, f"unparseable answer ({why})"
    why = hedge(pred, gold)
    if why:
        return False, f"hedged: {why}"
    pred, why = _equation_side(pred, gold)
    if pred is None:
        return False, why
    golds, preds = _percent_forms(_strip_text(gold)), _percent_forms(_strip_text(pred))
    reason = "not equivalent"
    for g in golds:
        for p in preds:
            equal, why = _equal(g, p)
            if equal:
                return True, ""
            reason = why if why != "not equivalent" and reason == "not equivalent" else reason
    return False, reason


def answer_key(answer: str | None) -> str | None:
    """One key per class of answers the verdict rules treat as the same number or text, for voting:
    plain numbers and LaTeX fractions of integers as their exact value (``1,000``, ``1000``,
    ``1000.0`` and ``\\frac{2000}{2}`` → ``1000``), ``x = 4`` as ``4``, ``50\\%`` as ``50``; anything
    else as its normalised text, case- and space-folded. None stays None. (Answers only math-verify
    relates, ``\\sqrt{4}`` and ``2``, keep separate keys: grouping by a symbolic verdict would cost a
    parse per pair.)

    >>> [answer_key(a) for a in ["1,000", "1000.0", "\\\\frac{2000}{2}", "x = 1000", "0.5", "1/2", " Paris ", None]]
    ['1000', '1000', '1000', '1000', '1/2', '1/2', 'paris', None]
    """
    if answer is None:
        return None
    text = normalise(answer)
    side, _ = _equation_side(text, "")
    text = _strip_percent(_strip_text(side if side is not None else text))
    value = plain_number(text)
    if value is None:
        value = latex_fraction(text)
    return str(value) if value is not None else _key(text)


def _percent_forms(text: str) -> list[str]:
    """The readings of an answer: ``x%`` is read as ``x`` (the percent sign is a unit label)."""
    return [_strip_percent(text)]


def _equal(gold: str, pred: str) -> tuple[bool, str]:
    """Exact fractions for plain numbers, text for words, else math-verify."""
    gold_value, pred_value = plain_number(gold), plain_number(pred)
    if gold_value is not None and pred_value is not None:
        return (True, "") if gold_value == pred_value else (False, "not equivalent")
    gold_value = gold_value if gold_value is not None else latex_fraction(gold)
    pred_value = pred_value if pred_value is not None else latex_fraction(pred)
    if gold_value is not None and pred_value is not None:  # a LaTeX fraction and a number
        if gold_value == pred_value:
            return True, ""
        if abs(gold_value - pred_value) > NUMERIC_GAP and max(abs(gold_value), abs(pred_value)) < NUMERIC_MAX:
            return False, "not equivalent"
    if _key(gold) == _key(pred):
        return True, ""
    if _WORD_RE.fullmatch(gold):  # "Paris" would parse as the product P·a·r·i·s: text compares as text
        return False, "not equivalent (as text)"
    try:
        _, verify = _math_verify()
        gold_parsed = _parse(gold)
        if not gold_parsed:
            return False, "not equivalent (gold unparseable)"
        pred_parsed = _parse(pred)
        if not pred_parsed:
            return False, "unparseable answer"
        pred_parsed = _with_gold_symbols(pred_parsed, gold_parsed)
        equal = bool(verify(gold_parsed, pred_parsed, timeout_seconds=None, raise_on_error=True))
    except RecursionError:
        return False, "unparseable answer (RecursionError)"
    except Exception as e:  # noqa: BLE001 — math-verify/sympy errors on model output are a verdict, not a crash
        return False, f"unparseable answer ({type(e).__name__}: {str(e)[:80]})"
    return (True, "") if equal else (False, "not equivalent")


# ----------------------------------------------------------------------------- finding the final answer
Mode = Literal["strict", "lenient"]
Where = Literal["answer_tag", "boxed"]
MODES = ("strict", "lenient")
WHERES = ("answer_tag", "boxed")

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE_RE = re.compile(r"\\boxed +([^\s${}]+)")  # MATH-style "\boxed 5"
_GSM8K_RE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(r"the[ \t]+(?:final[ \t]+)?answer[ \t]+is[ \t]*:?[ \t]*", re.I)
_LAST_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def find_boxed(text: str) -> list[str]:
    """Contents of every outermost ``\\boxed{…}`` / ``\\fbox{…}`` with balanced braces, in order.

    A box inside a box is one answer (``\\boxed{\\boxed{x}}`` → ``x``); ``\\{`` and ``\\}``
    count as text, not braces; an unclosed box is skipped (see `has_unclosed_box`). One pass over
    the text: nested boxes are not copied out one by one.

    >>> find_boxed(r"so \\boxed{\\frac{a}{b}} and \\fbox{\\{1,2\\}} but \\boxed{oops")
    ['\\\\frac{a}{b}', '\\\\{1,2\\\\}']
    >>> find_boxed(r"\\boxed{ \\boxed{\\boxed{7}} }")
    ['7']
    """
    close = _matching_braces(text)
    found, after = [], 0
    for m in _BOXED_RE.finditer(text):
        if m.start() < after or m.end() - 1 not in close:
            continue  # inside an earlier box, or unclosed
        start, end = m.end(), close[m.end() - 1]
        after = end
        while True:  # unwrap boxes that are the whole content: \boxed{\boxed{x}} is x
            while start < end and text[start].isspace():
                start += 1
            inner = _BOXED_RE.match(text, start)
            stop = end
            while stop > start and text[stop - 1].isspace():
                stop -= 1
            if not inner or close.get(inner.end() - 1) != stop - 1:
                break
            start, end = inner.end(), stop - 1
        found.append(text[start:end].strip())
    if not found and not has_unclosed_box(text, close):
        found = [m.group(1) for m in _BOXED_BARE_RE.finditer(text)]
    return found


def has_unclosed_box(text: str, close: dict[int, int] | None = None) -> bool:
    """Whether some ``\\boxed{`` / ``\\fbox{`` never closes (a malformed answer).

    >>> has_unclosed_box(r"\\boxed{5"), has_unclosed_box(r"\\boxed{5}")
    (True, False)
    """
    close = _matching_braces(text) if close is None else close
    return any(m.end() - 1 not in close for m in _BOXED_RE.finditer(text))


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` → index of its ``}``, in one pass (a backslash escapes the next character)."""
    close, stack, i, n = {}, [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            close[stack.pop()] = i
        i += 1
    return close


def _answer_blocks(text: str) -> list[str]:
    """Contents of the ``<answer>…</answer>`` blocks (like a lazy regex, but linear in the text)."""
    blocks, pos = [], 0
    while (start := text.find(ANSWER_OPEN, pos)) >= 0:
        end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
        if end < 0:
            break
        blocks.append(text[start + len(ANSWER_OPEN):end])
        pos = end + len(ANSWER_CLOSE)
    return blocks


def _hedge_key(answer: str) -> str:
    """What two answers must share to count as the same answer when checking for hedging."""
    return re.sub(r"\s+|\$", "", answer).rstrip(".")


def _pick(candidates: list[str], what: str) -> tuple[str | None, str]:
    """The last candidate, or (None, "hedged: …") when they differ."""
    distinct = {_hedge_key(c) for c in candidates}
    if len(distinct) > 1:
        return None, f"hedged: {len(distinct)} different {what}"
    return candidates[-1], ""


def extract_final_answer(text: str, mode: Mode = "lenient", where: Where = "answer_tag") -> tuple[str | None, str]:
    """The completion's final answer and where it came from.

    Returns ``(answer, source)``; source is ``"boxed"``, ``"answer_tag"``, ``"gsm8k"``,
    ``"answer_is"`` or ``"last_number"``; when there is no usable answer, answer is None and
    source is ``"none"`` or a ``"hedged: …"`` message. ``where`` only matters in strict mode.

    >>> extract_final_answer(r"so \\boxed{\\frac{1}{2}}.")
    ('\\\\frac{1}{2}', 'boxed')
    >>> extract_final_answer("<think>6*12</think><answer> 72 </answer>")
    ('72', 'answer_tag')
    >>> extract_final_answer("6 * 12 = 72\\n#### 72")
    ('72', 'gsm8k')
    >>> extract_final_answer("So the answer is 7.")
    ('7', 'answer_is')
    >>> extract_final_answer("I think 3 or maybe 4"), extract_final_answer("I think 3 or maybe 4", "strict")
    (('4', 'last_number'), (None, 'none'))
    >>> extract_final_answer(r"\\boxed{1} \\boxed{2} \\boxed{3}")
    (None, 'hedged: 3 different boxed answers')
    """
    if not isinstance(text, str):
        return None, "none"
    if mode not in MODES:
        raise ValueError(f"math reward mode must be one of {MODES} (got {mode!r})")
    if where not in WHERES:
        raise ValueError(f"math reward where must be one of {WHERES} (got {where!r})")
    strict = mode == "strict"
    found: list[tuple[int, str, str]] = []  # (where the statement ends, answer, source)
    if not strict or where == "boxed":
        close = _matching_braces(text)
        if has_unclosed_box(text, close):
            return None, "malformed: unclosed \\boxed{"
        boxed = [b for b in find_boxed(text) if b]
        if boxed:
            answer, hedge = _pick(boxed, "boxed answers")
            if answer is None:
                return None, hedge
            found.append((_last_box_end(text), answer, "boxed"))
    if not strict or where == "answer_tag":
        tagged = [a.strip() for a in _answer_blocks(text)]
        tagged = [a for a in tagged if a]
        if tagged:
            answer, hedge = _pick(tagged, "<answer> blocks")
            if answer is None:
                return None, hedge
            found.append((text.rfind(ANSWER_CLOSE), answer, "answer_tag"))
    if not strict:
        gsm = [(m.start(), m.group(1).strip()) for m in _GSM8K_RE.finditer(text) if m.group(1).strip()]
        if gsm:
            found.append((*gsm[-1], "gsm8k"))
        said = _last_answer_is(text)
        if said is not None:
            found.append((*said, "answer_is"))
    if found:  # a text that states an answer and later corrects it is scored on the last statement
        _, answer, source = max(found, key=lambda f: f[0])
        return answer, source
    if not strict:
        last = None
        for last in _LAST_NUMBER_RE.finditer(text):
            pass
        if last is not None:
            return last.group(0), "last_number"
    return None, "none"


def _last_box_end(text: str) -> int:
    last = None
    for last in _BOXED_RE.finditer(text):
        pass
    return last.start() if last is not None else -1


def _last_answer_is(text: str) -> tuple[int, str] | None:
    """Position and sentence of the last "the answer is …" (the anchor is found in one pass)."""
    last = None
    for last in _ANSWER_IS_RE.finditer(text):
        pass
    if last is None:
        return None
    answer = _answer_is(text[last.end():last.end() + 200].split("\n", 1)[0])
    return (last.start(), answer) if answer else None


def _answer_is(rest: str) -> str:
    """The sentence after "the answer is": cut at the first ". ", trailing period stripped."""
    rest = re.split(r"\.\s", rest, maxsplit=1)[0].strip()
    return rest[:-1].rstrip() if rest.endswith(".") else rest


ANSWER_FORMATS = ("answer_tag", "boxed", "gsm8k", "lenient")
"""Where a task's verifier reads the final answer (`task.kwargs.answer_format`): ``answer_tag`` the last
``<answer>…</answer>`` (the house format); ``boxed`` the ``\\boxed{…}`` (hedged or unclosed boxes earn
nothing); ``gsm8k`` the last ``#### x``; ``lenient`` the last stated of these and "the answer is x",
else the last number (`extract_final_answer`)."""


def check_answer_format(fmt: object, where: str = "task.kwargs.answer_format") -> str:
    """`fmt` when it is one of `ANSWER_FORMATS`, else a ValueError naming `where`."""
    if fmt not in ANSWER_FORMATS:
        raise ValueError(f"{where} must be one of {', '.join(ANSWER_FORMATS)} (got {fmt!r})")
    return str(fmt)


def find_answer(text: str, fmt: str = "answer_tag") -> tuple[str | None, str]:
    """``(answer, "")`` as format `fmt` reads it from a completion, or ``(None, why)``.

    >>> find_answer("<answer>12</answer>"), find_answer("so \\\\boxed{12}", "boxed")
    (('12', ''), ('12', ''))
    >>> find_answer("so \\\\boxed{12}"), find_answer("so 12", "boxed"), find_answer("48/2 = 24\\n#### 24", "gsm8k")
    ((None, 'no answer found'), (None, 'no answer found (boxed: \\\\boxed{…})'), ('24', ''))
    >>> find_answer("The answer is: 26.", "lenient"), find_answer(r"\\boxed{1} or \\boxed{2}", "boxed")
    (('26', ''), (None, 'hedged: 2 different boxed answers'))
    """
    if not isinstance(text, str):
        return None, "no answer found"
    if fmt == "answer_tag":
        answer = extract_answer(text)
    elif fmt == "gsm8k":
        found = [m.group(1).strip() for m in _GSM8K_RE.finditer(text)]
        answer = found[-1] if found and found[-1] else None
    else:
        answer, source = extract_final_answer(text, "lenient" if fmt == "lenient" else "strict",
                                              "boxed" if fmt == "boxed" else "answer_tag")
        if answer is None and source.startswith(("hedged", "malformed")):
            return None, source
    if answer is None:
        shown = {"answer_tag": "", "boxed": " (boxed: \\boxed{…})", "gsm8k": " (gsm8k: #### …)",
                 "lenient": " (lenient: no stated answer, no number)"}[check_answer_format(fmt)]
        return None, f"no answer found{shown}"
    return answer, ""


class FormattedAnswers:
    """For a task class: `extract_answer` (the vote's answer) reads `answer_format` (`find_answer`)."""

    answer_format: str = "answer_tag"

    def extract_answer(self, completion: str) -> str | None:
        return find_answer(completion, self.answer_format)[0]
