"""Writes rendered.json: what each template renders for a few conversations,
as Hugging Face's apply_chat_template renders it (Jinja2 with trim_blocks and
lstrip_blocks). Run from this folder: python3 render.py"""
import json
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = ["chatml.jinja", "qwen2.jinja", "qwen2.5.jinja", "qwen3.jinja"]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You write Python."},
     {"role": "user", "content": "Write fib."},
     {"role": "assistant", "content": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)"},
     {"role": "user", "content": "Now test it."}],
    [{"role": "user", "content": "a"},
     {"role": "assistant", "content": "b\n"},
     {"role": "user", "content": "\n c  with spaces\n\nand blank lines"},
     {"role": "assistant", "content": " d"},
     {"role": "user", "content": "é ü 中文 🙂"}],
]


def render(src, msgs, gen):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    return env.from_string(src).render(messages=msgs, add_generation_prompt=gen, tools=None)


out = []
for name in TEMPLATES:
    src = open(name, encoding="utf-8").read()
    for msgs in CONVERSATIONS:
        for gen in (True, False):
            out.append({"template": name, "messages": msgs, "add_generation_prompt": gen, "text": render(src, msgs, gen)})
with open("rendered.json", "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
