"""Regenerates jinja_cases.json: feature snippets rendered by python jinja2 (the reference) with the
environment transformers uses. test_jinja.cpp renders the same snippets with gridq and compares.
Run: .venv/bin/python tests/text/gen_jinja_cases.py"""
import json
from pathlib import Path

import jinja2
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if separators is None: separators = (",", ": ") if indent else (", ", ": ")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
CTX = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 1, "a": [1, {"x": "é<>"}], "c": None},
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "t": True, "none": None,
       "u8": "héllo wörld 😀"}
CASES = [
 "{{ s }}|{{ n }}|{{ f }}|{{ t }}|{{ none }}|{{ l }}|{{ d }}",
 "{{ missing }}|{{ missing is defined }}|{{ n is defined }}|{{ d.zz is undefined }}",
 "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
 "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}:{{ x }} {% endfor %}",
 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
 "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'abc' %}{{ c }}-{% endfor %}",
 "{% for x in [] %}x{% else %}empty{% endfor %}",
 "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}",
 "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
 "{% set a = 1 %}{% for x in l %}{% set a = a + x %}{% endfor %}{{ a }}",
 "{% set ns = namespace(a=1) %}{% for x in l %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }}",
 "{% set blk %}  inner {{ n }}  {% endset %}[{{ blk }}]",
 "{% macro m(a, b='B', c=none) %}<{{ a }}|{{ b }}|{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}",
 "{{ l[0] }}{{ l[-1] }}{{ l[1:] }}{{ l[:2] }}{{ l[::-1] }}{{ l[::2] }}{{ 'abcdef'[1:4] }}{{ u8[1:4] }}{{ u8[-1] }}",
 "{{ s | trim }}|{{ s | length }}|{{ u8 | length }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}",
 "{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ none | default('x') }}",
 "{{ l | join(', ') }}|{{ l | first }}|{{ l | last }}|{{ 'ab' | list }}|{{ n | string }}|{{ '42' | int + 1 }}|{{ 2.7 | int }}",
 "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|{{ [1.0, 1e20, 0.1, -0.0, 3] | tojson }}",
 "{{ d | items | list }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 'xyz' | safe }}",
 "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.startswith('  He') }}|{{ s.endswith(('x', '  ')) }}",
 "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'hello there'.title() }}",
 "{{ d.get('b') }}|{{ d.get('zz', 'no') }}|{{ d.get('zz') }}|{{ d.keys() | list }}|{{ d['a'][1]['x'] }}|{{ d.a[1].x }}",
 "{{ none is none }}|{{ s is string }}|{{ d is mapping }}|{{ l is iterable }}|{{ l is sequence }}|{{ n is number }}|{{ t is boolean }}|{{ n is integer }}|{{ f is float }}|{{ 2 in l }}|{{ 'ell' in s }}|{{ 'b' in d }}|{{ 5 is in l }}",
 "{{ n is odd }}|{{ n is even }}|{{ 9 is divisibleby 3 }}|{{ n is not none }}|{{ t is true }}|{{ none is false }}|{{ n is eq 7 }}",
 "{{ 1 + 2 * 3 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 1.5 + 1 }}|{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}",
 "{{ n == 7.0 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ n != 7 }}|{{ not t }}|{{ t and n }}|{{ none or 'x' }}|{{ 1 if t else 2 }}|{{ 'y' if none }}",
 "{{ 'x' if n > 3 else 'y' }}{{ (1, 2) }}{{ {'k': [1, 2]} }}{{ \"it's\" }}{{ 'say \"hi\"' ~ '' }}",
 "  {% if t %}\n    indented\n  {% endif %}\nend",
 "a  {%- if t -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n e {# comment #} f\n{#- c2 -#}\ng",
 "{% for m in msgs %}\n  {{ m.role }}: {{ m.content }}\n{% endfor %}\n",
 "line\n{% raw %}{{ not evaluated }}{% endraw %}\n",
 "{% set x, y = [1, 2] %}{{ x }}{{ y }}{% with z = 5 %}{{ z }}{% endwith %}{{ z is defined }}",
 "{% filter upper %}abc {{ n }}{% endfilter %}|{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 3] | unique | list }}|{{ l | max }}{{ l | min }}{{ l | sum }}",
 "{{ msgs | map(attribute='role') | join(',') }}|{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}|{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='content') | first }}",
 "{{ 'a\\tb\\u00e9\\x41' }}|{{ \"q'\" }}|{{ 'x' 'y' }}|{{ 1_000 }}|{{ 1.5e3 }}|{{ 0.1 + 0.2 }}|{{ 1e100 }}|{{ 123456789012345678 }}",
 "{% for a in range(3) %}{{ a }}{% endfor %}|{{ range(1, 10, 3) | list }}|{{ 'ab' ~ (n | string) }}|{{ -n }}|{{ l | reverse | list }}|{{ d | length }}",
 "{% macro outer(x) %}[{{ inner(x) }}]{% endmacro %}{% macro inner(y) %}{{ y * 2 }}{% endmacro %}{{ outer(4) }}",
 "{{ 'x' | indent(2) }}|{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(4, true) }}|{{ '%s-%d' | format('a', 3) }}|{{ '%s!' % 'hi' }}",
 "{% set d2 = {'z': 1, 'a': 2} %}{{ d2 | dictsort }}|{{ d2 | tojson }}|{{ msgs[-1]['role'] }}|{{ msgs[5] is defined }}",
 "{%+ if t %}  keep{% endif %}\n  {%+ if t %}x{% endif %}",
 "{{ '%s-%s' % (1, 'b') }}|{{ '%s' % [1, 2] }}|{{ (1,) }}|{{ (1, 2)[1:] }}|{{ (1, 2) | list }}|{{ d.items() | first }}|{{ (1, 2) == [1, 2] }}",
]
out = []
for c in CASES:
    out.append({"template": c, "expected": env.from_string(c).render(**CTX)})
json.dump({"context": CTX, "cases": out}, open(Path(__file__).with_name("jinja_cases.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
print(len(out))
