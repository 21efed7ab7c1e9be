"""The one redaction (core/redaction.py, issue 22): secrets by value, by shape, by name in text and
under credential-named keys; names read in every case style, both ways; ordinary text left alone;
``hits`` never passes a body that ``walk`` would change."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.core import redaction
from flower_magic.core.redaction import REDACTED, Redactor, secret_env_name, secret_name
from flower_magic.core.storage import StoreLocation
from tests.plants import PLANTS

# The plants whose cell's source holds the value where text alone shows it is a secret; the repr's
# token is a positional argument (found from the variable: tests/test_notebook.py).
BY_TEXT = [p for p in PLANTS if p.shape != "an attribute shown by a repr"]


@pytest.mark.parametrize("plant", BY_TEXT, ids=[p.shape for p in BY_TEXT])
def test_every_planted_shape_is_hidden_in_the_cell_that_plants_it(plant) -> None:
    """Issue 22 item 5: the recent cells' source carried 8 of them to the model verbatim."""
    said = Redactor({})(plant.cell)
    assert REDACTED in said
    assert not [v for v in plant.values if v in said], said


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ('%config FlowerMagics.sessions = "postgresql://u:Pg-Pass-w0rd@db:5432/runs"', "Pg-Pass-w0rd"),
        ('%flower --sessions postgresql://u:Pg-Pass-w0rd@db/runs "clean the csv"', "Pg-Pass-w0rd"),
        ('os.environ["FLOWER_SESSIONS"] = "postgresql://u:Pg-Pass-w0rd@db/runs"', "Pg-Pass-w0rd"),
        ('os.environ["API_KEY"] = "k-Pass-w0rd"', "k-Pass-w0rd"),
        ("conninfo = 'host=db password=Pg-Pass-w0rd dbname=runs'", "Pg-Pass-w0rd"),
        ("postgresql://u@db/runs?sslmode=require&password=Pg-Pass-w0rd", "Pg-Pass-w0rd"),
        ("ANTHROPIC_AUTH_TOKEN=gw-9f8e7d6c5b4a\nHOME=/root\n", "gw-9f8e7d6c5b4a"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==\nHost: x", "dXNlcjpwYXNzd29yZA=="),
        ("Cookie: sid=abc123; theme=dark\n", "sid=abc123; theme=dark"),
        ("curl -H 'X-Api-Key: xk-1234abcd' https://api", "xk-1234abcd"),
        ("password: str = 'default-pw-1'", "default-pw-1"),
        ('auth = ("ann", "tuple-pw-1")', "tuple-pw-1"),
        ("if password == 'letmein-9':", "letmein-9"),
        ("PGPASSWORD=pg-env-pw-77 psql", "pg-env-pw-77"),
        ("密码:mima-12345", "mima-12345"),
        ("client_secret='cs-4242-abcd'", "cs-4242-abcd"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
        ("xoxb-1234567890-abcdefghij is the bot", "xoxb-1234567890-abcdefghij"),
        ("glued:xxxxsk-ant-api03-glued-abcdefgh", "sk-ant-api03-glued"),
    ],
)
def test_secrets_in_code_env_output_headers_and_urls_are_hidden(text: str, hidden: str) -> None:
    said = Redactor({})(text)
    assert hidden not in said and REDACTED in said, said


@pytest.mark.parametrize(
    "text",
    [
        "for key in d:\n    print(key, d[key])",
        "key = 'region'",
        "sort_key = lambda row: row[1]",
        "tokenizer = AutoTokenizer.from_pretrained(name)\ntokens = tokenizer(text)",
        "max_tokens = 4096\ntoken_count: 12\ninput_tokens=812",
        "pad_token = '<pad>'",
        "the author wrote it on a keyboard, said the monkey",
        "step 7 passed the checks in 2 tries: ok",
        "password = getpass.getpass()\ntoken = os.environ['HF_TOKEN']",
        "def login(password: str, token: str | None = None) -> None:",
        "self.url, self.token = url, token",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "session 0b8f5a0e-3c1d-4e2a-9f6b-7a1c2d3e4f50",
        "https://user@example.com/x and postgresql://u@db:5432/runs",
        "sk-learn is a typo; the basic idea; the bearer of news",
        "use_auth_token=True, auth_method='oauth', api_key_env='OPENAI_API_KEY'",
        "PWD=/work/project\nOLDPWD=/work",
    ],
)
def test_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert Redactor({})(text) == text


@pytest.mark.parametrize(
    "name",
    [
        "dbPassword", "awsSecretAccessKey", "pw", "pwd", "hf_tok", "API_KEY", "OPENAI_API_KEY", "github_token",
        "db-password", "DB_PASS", "dbPass", "X-Api-Key", "Authorization", "Cookie", "Set-Cookie", "api_keys",
        "client_secret", "access_token", "refresh_token", "PGPASSWORD", "credentials", "creds", "bearer",
        "privateKey", "mytoken", "jwt", "secret_key", "ANTHROPIC_AUTH_TOKEN", "HTTPAuth", "ssh_key",
    ],
)  # fmt: skip
def test_names_that_read_as_credentials_in_any_case_style(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "keyboard", "monkey", "author", "authors", "tokenizer", "tokens", "max_tokens", "input_tokens",
        "token_count", "sort_key", "primary_key", "key", "keys", "dict_keys", "pad_token", "next_token",
        "pass_rate", "passenger", "bypass", "auth_method", "use_auth_token", "api_key_env", "SSH_AUTH_SOCK",
        "TOKENIZERS_PARALLELISM", "orders", "table", "x", "",
    ],
)  # fmt: skip
def test_names_that_do_not(name: str) -> None:
    assert not secret_name(name)


def test_the_working_directory_is_not_an_environment_secret() -> None:
    assert secret_name("pwd") and not secret_env_name("PWD") and not secret_env_name("OLDPWD")


def test_the_environments_own_secrets_are_hidden_whatever_their_shape() -> None:
    """Issue 22 item 7: a gateway token not shaped like sk-ant- was served verbatim."""
    environ = {
        "ANTHROPIC_AUTH_TOKEN": "gw-9f8e7d6c5b4a",
        "FLOWER_SESSIONS": "postgresql://u:Env-Pg-Pass@db/runs",
        "HOME": "/home/person",
        "PWD": "/home/person/project",
    }
    said = Redactor(environ)("token gw-9f8e7d6c5b4a, then Env-Pg-Pass alone, in /home/person/project")
    assert "gw-9f8e7d6c5b4a" not in said and "Env-Pg-Pass" not in said
    assert "/home/person/project" in said


def test_a_store_password_parsed_anywhere_in_the_process_is_hidden_from_then_on() -> None:
    redactor = Redactor({})
    assert redactor("the-parsed-store-pw") == "the-parsed-store-pw"
    StoreLocation.parse("postgresql://u:the-parsed-store-pw@db/runs")
    assert redactor("failed: the-parsed-store-pw") == f"failed: {REDACTED}"
    assert redactor.hits(json.dumps({"x": "the-parsed-store-pw"}).encode())


def test_values_under_credential_keys_at_any_depth_are_replaced_and_nothing_else() -> None:
    body = {
        "headers": [{"Authorization": "Bearer abc", "Accept": "json"}, {"X-Api-Key": ["k1", "k2"]}],
        "db": {"config": {"password": "p", "port": 5432, "pin": 12345678}},
        "usage": {"input_tokens": 812, "output_tokens": 3},
        "text": "ran `env`: ANTHROPIC_API_KEY=plain-value-1\nLANG=C",
    }
    before = json.dumps(body)
    said = Redactor({}).walk(body)
    assert json.dumps(body) == before  # the original is not changed
    assert said["headers"] == [{"Authorization": REDACTED, "Accept": "json"}, {"X-Api-Key": [REDACTED, REDACTED]}]
    assert said["db"] == {"config": {"password": REDACTED, "port": 5432, "pin": 12345678}}
    assert said["usage"] == body["usage"]
    assert said["text"] == f"ran `env`: ANTHROPIC_API_KEY={REDACTED}\nLANG=C"


def test_json_escaped_spellings_of_a_known_value_are_found() -> None:
    secret = 'quo"te\\back-ünï'
    data = json.dumps({"a": f"x {secret} y"}, ensure_ascii=True).encode()
    assert Redactor({}, values=[secret]).hits(data)


def test_a_large_body_is_looked_at_in_pieces_and_a_new_secret_row_is_still_found() -> None:
    rows = [{"index": i, "text": f"step {i} finished; wrote files and ran the tests"} for i in range(6000)]
    redactor = Redactor({})
    data = json.dumps({"rows": rows}, separators=(",", ":")).encode()
    assert len(data) > redaction.PIECED_BYTES
    assert not redactor.hits(data) and not redactor.hits(data)  # the second look: every piece known clean
    rows.append({"index": 6000, "text": "export OPENAI_API_KEY=sk-proj-abcdefghij0123456789xyz"})
    assert redactor.hits(json.dumps({"rows": rows}, separators=(",", ":")).encode())
    rows[-1] = {"index": 6000, "password},{x": "split-at-a-cut"}  # a key that holds the cut itself
    assert redactor.hits(json.dumps({"rows": rows}, separators=(",", ":")).encode())


_WORDS = st.sampled_from(
    [
        "step", "passed", "the", "key", "tokens", "auth", "ok:", "x=1", "password", "=", ":", '"', "\\", "\n",
        "sk-ant-api03-abcdefghij", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAABCDEFGHIJKLMNOP",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEK3Y", "postgresql://u:pw@h/db", "Bearer abcdefgh1234",
        "eyJhbGciOiJI.eyJzdWIiOiIx.sig", "hunter22", "},{", "密码", "API_KEY", "Cookie",
    ]
)  # fmt: skip
_TEXT = st.lists(_WORDS, max_size=8).map(" ".join) | st.text(string.printable, max_size=40)
_JSON = st.recursive(
    st.none() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_hits_never_passes_a_body_that_walk_would_change(body) -> None:
    redactor = Redactor({}, values=["hunter22"])
    if redactor.walk(body) != json.loads(json.dumps(body)):
        assert redactor.hits(json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass"))
