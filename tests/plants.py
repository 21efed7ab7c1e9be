"""The secrets a notebook holds in issue 22 (item 5): each a cell that plants it and the values that
must reach no model, no file and no panel answer. The first 13 are the shapes the issue found
reaching the model; the last 7 are other common ones.

``run_plants`` executes them the way a kernel would (a cell's last expression is its output, an
exception is its error) for the tests that read a namespace without a kernel.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from flower_magic.core.notebook import Cell

TAG = "3kq9Zt"  # in every planted value: nothing else in a run carries it


@dataclass(frozen=True)
class Plant:
    """One planted secret.

    Attributes:
        shape: what it is, as the issue says it.
        cell: the code that plants it (a cell of its own).
        values: what must appear nowhere.
    """

    shape: str
    cell: str
    values: tuple[str, ...]


PLANTS = [
    Plant("camelCase name: dbPassword", f'dbPassword = "Db-pass-{TAG}"', (f"Db-pass-{TAG}",)),
    Plant(
        "camelCase name: awsSecretAccessKey",
        f'awsSecretAccessKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY{TAG}PLNT"',
        (f"wJalrXUtnFEMI/K7MDENG/bPxRfiCY{TAG}PLNT",),
    ),
    Plant("pw", f'pw = "pw-s3cret-{TAG}"', (f"pw-s3cret-{TAG}",)),
    Plant("hf_tok", f'hf_tok = "hf_Qm{TAG}VbNcXzLkJhGfDsApOiUyTrEwQq"', (f"hf_Qm{TAG}VbNcXzLkJhGfDsApOiUyTrEwQq",)),
    Plant(
        "postgresql://alice:…@ URL",
        f'dsn = "postgresql://alice:Al1ce-{TAG}@db.internal:5432/app"',
        (f"Al1ce-{TAG}",),
    ),
    Plant("mysql://root:…@ URL", f'shop_url = "mysql://root:R00t-{TAG}@localhost/shop"', (f"R00t-{TAG}",)),
    Plant(
        '{"Authorization": "Bearer …"}',
        f'headers = {{"Authorization": "Bearer Bx{TAG}TokenValue0123456789"}}',
        (f"Bx{TAG}TokenValue0123456789",),
    ),
    Plant(
        'nested {"db": {"password": …}}',
        f'settings = {{"db": {{"host": "db.internal", "password": "Nested-{TAG}"}}}}',
        (f"Nested-{TAG}",),
    ),
    Plant(
        "a list of dicts with a secret key",
        f'accounts = [{{"user": "ann", "api_key": "ak-ann-{TAG}"}}, {{"user": "bob", "api_key": "ak-bob-{TAG}"}}]',
        (f"ak-ann-{TAG}", f"ak-bob-{TAG}"),
    ),
    Plant(
        "a DataFrame password column",
        "import pandas as pd\n"
        f'users = pd.DataFrame({{"name": ["ann", "bob"], "password": ["Frame-ann-{TAG}", "Frame-bob-{TAG}"]}})\n'
        "users",
        (f"Frame-ann-{TAG}", f"Frame-bob-{TAG}"),
    ),
    Plant(
        "an attribute shown by a repr",
        "class Client:\n"
        "    def __init__(self, url, token):\n"
        "        self.url, self.token = url, token\n"
        "    def __repr__(self):\n"
        '        return f"Client(url={self.url!r}, token={self.token!r})"\n'
        f'client = Client("https://api.internal", "Repr-{TAG}-tok")\n'
        "client",
        (f"Repr-{TAG}-tok",),
    ),
    Plant(
        "a secret in an exception message",
        f'cfg = {{"token": "Exc-{TAG}-tok"}}\nraise RuntimeError("login refused for " + cfg["token"])',
        (f"Exc-{TAG}-tok",),
    ),
    Plant("a printed one", f'print("admin password: Print-{TAG}-pw")', (f"Print-{TAG}-pw",)),
    Plant("API_KEY", f'API_KEY = "api-{TAG}-key-0042"', (f"api-{TAG}-key-0042",)),
    Plant(
        "OPENAI_API_KEY = sk-proj-…",
        f'OPENAI_API_KEY = "sk-proj-{TAG}AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"',
        (f"sk-proj-{TAG}AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",),
    ),
    Plant(
        "github_token = ghp_…",
        f'github_token = "ghp_{TAG}AbCdEfGhIjKlMnOpQrStUvWxYz0123"',
        (f"ghp_{TAG}AbCdEfGhIjKlMnOpQrStUvWxYz0123",),
    ),
    Plant(
        "a JWT under an ordinary name",
        f'claims = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIza3E5WnQifQ.{TAG}-SignatureValue_abc"',
        (f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIza3E5WnQifQ.{TAG}-SignatureValue_abc",),
    ),
    Plant("an AWS access key id (AKIA…)", 'aws_key_id = "AKIA3KQ9ZTEXAMPLE7Q2"', ("AKIA3KQ9ZTEXAMPLE7Q2",)),
    Plant(
        ".env text",
        f'env_text = "DB_HOST=db.internal\\nDB_PASSWORD=Env-{TAG}-pw\\nSTRIPE_SECRET=Env-{TAG}-stripe\\n"',
        (f"Env-{TAG}-pw", f"Env-{TAG}-stripe"),
    ),
    Plant(
        'headers={"Cookie": …, "X-Api-Key": …}',
        f'req_headers = {{"Cookie": "sid=Cookie-{TAG}", "X-Api-Key": "Xkey-{TAG}-0042"}}',
        (f"Cookie-{TAG}", f"Xkey-{TAG}-0042"),
    ),
]


def run_plants(plants: list[Plant], first: int = 1) -> tuple[dict[str, Any], list[Cell]]:
    """Run each plant's cell as a kernel would; returns the namespace and the cells (numbered from
    ``first``) with their outputs and errors."""
    ns: dict[str, Any] = {}
    cells = []
    for number, plant in enumerate(plants, start=first):
        tree = ast.parse(plant.cell)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        body = ast.Module(body=tree.body[:-1] if last else tree.body, type_ignores=[])
        output, error = None, ""
        try:
            exec(compile(body, f"<cell {number}>", "exec"), ns)
            if last is not None:
                output = eval(compile(ast.Expression(last.value), f"<cell {number}>", "eval"), ns)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        cells.append(Cell(number, plant.cell, error, None if output is None else output))
    ns.pop("__builtins__", None)
    return ns, cells
