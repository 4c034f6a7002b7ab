# mypy: disable-error-code="no-untyped-call"
"""Writes `redaction_corpus.jsonl`: labelled strings for the masker (seeded, reproducible).

    python tests/data/make_redaction_corpus.py

Each line: {"kind": ..., "text": ..., "secrets": [raw values that must not survive]}. Kinds
starting with `lookalike:` carry no secret and must come out unchanged. Values are generated
in the formats each kind really has (checksums computed, vendors' documented token shapes),
placed in English and Chinese contexts: prose, key-value, JSON, logs, headers, URLs.
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from pathlib import Path

R = random.Random(20261122)
OUT = Path(__file__).with_name("redaction_corpus.jsonl")
ALNUM = string.ascii_letters + string.digits


def rand(chars: str, n: int) -> str:
    return "".join(R.choice(chars) for _ in range(n))


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + rand(string.digits, length - len(prefix) - 1)
    for check in string.digits:
        digits = [int(d) for d in body + check][::-1]
        total = sum(
            d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2) for i, d in enumerate(digits)
        )
        if total % 10 == 0:
            return body + check
    raise AssertionError


def luhn_broken(prefix: str, length: int) -> str:
    good = luhn_complete(prefix, length)
    return good[:-1] + str((int(good[-1]) + R.randint(1, 9)) % 10)


def iban_of(country: str, bban: str) -> str:
    moved = bban + country + "00"
    number = int("".join(str(int(c, 36)) for c in moved))
    return f"{country}{98 - number % 97:02d}{bban}"


def ric() -> str:
    area = R.choice(["110101", "310104", "440305", "510107", "330106", "420102"])
    birth = f"{R.randint(1950, 2005)}{R.randint(1, 12):02d}{R.randint(1, 28):02d}"
    body = area + birth + f"{R.randint(0, 999):03d}"
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    check = "10X98765432"[sum(int(d) * w for d, w in zip(body, weights, strict=True)) % 11]
    return body + check


def ssn() -> str:
    area = R.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}-{R.randint(1, 99):02d}-{R.randint(1, 9999):04d}"


def group(digits: str, sizes: list[int], sep: str) -> str:
    out, at = [], 0
    for size in sizes:
        out.append(digits[at : at + size])
        at += size
    return sep.join(out)


def jwt() -> str:
    def b64(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    head = b64({"alg": R.choice(["HS256", "RS256"]), "typ": "JWT"})
    body = b64({"sub": str(R.randint(1, 10**6)), "name": "Mia Li", "iat": 1700000000})
    return f"{head}.{body}.{rand(ALNUM + '-_', 43)}"


def pem() -> str:
    kind = R.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
    lines = [rand(ALNUM + "+/", 64) for _ in range(R.randint(3, 8))]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----"


SECRETS = {
    "aws_access_key": lambda: (
        R.choice(["AKIA", "ASIA"]) + rand(string.ascii_uppercase + "234567", 16)
    ),
    "aws_secret": lambda: rand(ALNUM + "/+", 40),
    "gcp_api_key": lambda: "AIza" + rand(ALNUM + "-_", 35),
    "azure_client_secret": lambda: (
        rand(ALNUM, 3) + str(R.randint(0, 9)) + "Q~" + rand(ALNUM + "_~.-", 34)
    ),
    "azure_storage_key": lambda: rand(ALNUM + "+/", 86) + "==",
    "github_token": lambda: R.choice(["ghp_", "gho_", "ghs_"]) + rand(ALNUM, 36),
    "github_pat": lambda: (
        "github_pat_11" + rand(string.ascii_uppercase + string.digits, 20) + "_" + rand(ALNUM, 59)
    ),
    "gitlab_token": lambda: "glpat-" + rand(ALNUM + "_-", 20),
    "slack_token": lambda: (
        R.choice(["xoxb-", "xoxp-"])
        + f"{R.randint(10**10, 10**12)}-{R.randint(10**10, 10**12)}-"
        + rand(string.ascii_lowercase + string.digits, 24)
    ),
    "stripe_key": lambda: R.choice(["sk_live_", "rk_live_"]) + rand(ALNUM, 24),
    "openai_key": lambda: "sk-proj-" + rand(ALNUM + "_-", 48),
    "anthropic_key": lambda: "sk-ant-api03-" + rand(ALNUM + "_-", 40),
    "jwt": jwt,
    "bearer": lambda: rand(ALNUM + "._-", R.randint(24, 48)),
    "basic_auth": lambda: base64.b64encode(f"admin:{rand(ALNUM, 12)}".encode()).decode(),
    "url_password": lambda: rand(ALNUM + "!_", R.randint(8, 16)),
    "private_key": pem,
    "email": lambda: (
        R.choice(["mia.li", "j.smith+orders", "ops", "zhang_wei88", "a.b-c"])
        + str(R.randint(1, 99))
        + "@"
        + R.choice(["example.com", "corp.example.org", "mail.example.cn", "qq.com", "163.com"])
    ),
    "phone": lambda: R.choice(
        [
            "+1 650-253-" + f"{R.randint(0, 9999):04d}",
            "+1 (212) 555-0" + f"{R.randint(100, 199)}",
            "(415) 867-" + f"{R.randint(1000, 9999)}",
            "+44 20 7946 0" + f"{R.randint(100, 999)}",
            "+49 30 " + f"{R.randint(1000000, 9999999)}",
            "+33 1 42 68 " + f"{R.randint(10, 99)} {R.randint(10, 99)}",
            "+81 3-" + f"{R.randint(1000, 9999)}-{R.randint(1000, 9999)}",
            "+61 2 " + f"{R.randint(8000, 9999)} {R.randint(1000, 9999)}",
            "+91 98" + f"{R.randint(10000000, 99999999)}",
        ]
    ),
    "cn_mobile": lambda: (
        R.choice(["", "+86 ", "86-"])
        + R.choice(["138", "139", "150", "186", "177", "199"])
        + R.choice(["", " ", "-"]).join([f"{R.randint(0, 9999):04d}", f"{R.randint(0, 9999):04d}"])
    ),
    "card_number": lambda: R.choice(
        [
            lambda: group(luhn_complete("4", 16), [4, 4, 4, 4], R.choice([" ", "-", ""])),
            lambda: group(
                luhn_complete(R.choice(["51", "53", "55", "2221"]), 16),
                [4, 4, 4, 4],
                R.choice([" ", "-", ""]),
            ),
            lambda: group(
                luhn_complete(R.choice(["34", "37"]), 15), [4, 6, 5], R.choice([" ", ""])
            ),
            lambda: luhn_complete("6011", 16),
            lambda: group(luhn_complete("62", 19), [4, 4, 4, 4, 3], " "),
            lambda: luhn_complete("4", 13),
        ]
    )(),
    "us_ssn": ssn,
    "iban": lambda: R.choice(
        [
            lambda: iban_of("DE", f"{R.randint(10**17, 10**18 - 1)}"),
            lambda: iban_of("GB", "NWBK" + f"{R.randint(10**13, 10**14 - 1)}"),
            lambda: iban_of(
                "FR",
                f"{R.randint(10**9, 10**10 - 1)}"
                + rand(string.ascii_uppercase + string.digits, 11)
                + f"{R.randint(10, 99)}",
            ),
            lambda: iban_of("NL", "ABNA" + f"{R.randint(10**9, 10**10 - 1)}"),
            lambda: iban_of("ES", f"{R.randint(10**19, 10**20 - 1)}"),
        ]
    )(),
    "cn_resident_id": ric,
}

CONTEXTS_EN = [
    "my {label} is {v}",
    "{label}: {v}",
    "Error: request rejected for {v} (401)",
    '{{"{key}": "{v}", "status": "ok"}}',
    "Please use {v} when you call back.",
    "tool output -> {v}\nnext step: retry",
]
CONTEXTS_ZH = [
    "我的{label_zh}是{v}，请帮我处理",
    "{label_zh}：{v}。",
    "用户提供了{v}，系统已记录",
]
LABELS = {
    "aws_access_key": ("AWS access key id", "AWS密钥", "aws_access_key_id"),
    "gcp_api_key": ("Google API key", "谷歌API密钥", "google_api_key"),
    "azure_client_secret": ("Azure client secret", "Azure客户端密钥", "azure_client_secret"),
    "github_token": ("GitHub token", "GitHub令牌", "github_token"),
    "github_pat": ("GitHub PAT", "GitHub令牌", "gh_pat"),
    "gitlab_token": ("GitLab token", "GitLab令牌", "gitlab_token"),
    "slack_token": ("Slack bot token", "Slack令牌", "slack_token"),
    "stripe_key": ("Stripe key", "Stripe密钥", "stripe_key"),
    "openai_key": ("OpenAI key", "OpenAI密钥", "openai_api_key"),
    "anthropic_key": ("Anthropic key", "Anthropic密钥", "anthropic_api_key"),
    "jwt": ("session token", "会话令牌", "id_token"),
    "email": ("email", "邮箱", "email"),
    "phone": ("phone", "电话", "phone"),
    "cn_mobile": ("mobile", "手机号", "mobile"),
    "card_number": ("card", "银行卡号", "card_number"),
    "us_ssn": ("SSN", "社保号", "ssn"),
    "iban": ("IBAN", "国际银行账号", "iban"),
    "cn_resident_id": ("ID number", "身份证号", "id_number"),
}
# kinds whose value only means something in its own syntax
SPECIAL = {
    "aws_secret": [
        "aws_secret_access_key = {v}",
        "AWS_SECRET_ACCESS_KEY={v}",
        '{{"aws_secret_access_key": "{v}"}}',
        "export AWS_SECRET_ACCESS_KEY='{v}'",
    ],
    "azure_storage_key": [
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={v};EndpointSuffix=core.windows.net",
        "连接串 AccountName=prod;AccountKey={v}",
    ],
    "bearer": [
        "Authorization: Bearer {v}",
        "curl -H 'Authorization: Bearer {v}' https://api.example.com/v1/orders",
        "请求头 Authorization: Bearer {v} 已过期",
        '{{"headers": {{"Authorization": "Bearer {v}"}}}}',
    ],
    "basic_auth": [
        "Authorization: Basic {v}",
        "sent header authorization: basic {v}",
        "认证头 Authorization: Basic {v}",
    ],
    "url_password": [
        "postgres://app:{v}@db.internal:5432/orders",
        "connecting to mysql://root:{v}@10.0.0.5/shop failed",
        "redis://default:{v}@cache:6379/0",
        "数据库连接 mongodb://admin:{v}@mongo.example.cn:27017 超时",
        "https://deploy:{v}@git.example.com/repo.git",
    ],
    "private_key": [
        "key file content:\n{v}\n(end)",
        '{{"private_key": "{v}"}}',
        "私钥如下：\n{v}",
    ],
}

LOOKALIKES = {
    "order_number": lambda: R.choice(
        [
            f"Order #{R.randint(10**5, 10**8)} shipped",
            f"订单号 {R.randint(10**9, 10**11)} 已发货",
            f"invoice INV-{R.randint(2019, 2026)}-{R.randint(1, 99999):05d}",
            f"reservation {rand(string.ascii_uppercase + string.digits, 6)} confirmed",
            f"ticket 0{R.randint(10**11, 10**12 - 1)} issued",
            f"tracking 1Z{rand(string.ascii_uppercase + string.digits, 16)}",
        ]
    ),
    "non_luhn_number": lambda: R.choice(
        [
            f"account ref {luhn_broken('4', 16)}",
            f"参考编号 {luhn_broken('5', 16)}",
            f"batch {group(luhn_broken('6', 16), [4, 4, 4, 4], ' ')}",
        ]
    ),
    "uuid": lambda: R.choice(
        [
            f"request {uuid.UUID(int=R.getrandbits(128))}",
            f"trace_id={uuid.UUID(int=R.getrandbits(128)).hex}",
        ]
    ),
    "hash": lambda: R.choice(
        [
            f"commit {rand('0123456789abcdef', 40)}",
            f"sha256:{rand('0123456789abcdef', 64)}",
            f"md5 {rand('0123456789abcdef', 32)}",
            f"short sha {rand('0123456789abcdef', 7)}",
        ]
    ),
    "timestamp": lambda: R.choice(
        [
            f"at 2026-{R.randint(1, 12):02d}-{R.randint(1, 28):02d}T{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}Z",
            f"ts={R.randint(1_600_000_000, 1_800_000_000)}",
            f"ts_ms={R.randint(1_600_000_000_000, 1_800_000_000_000)}",
            f"{R.randint(2020, 2026)}年{R.randint(1, 12)}月{R.randint(1, 28)}日 {R.randint(0, 23)}:{R.randint(10, 59)}",
            f"window 09:{R.randint(10, 59)}-17:{R.randint(10, 59)}",
        ]
    ),
    "version": lambda: R.choice(
        [
            f"v{R.randint(0, 9)}.{R.randint(0, 30)}.{R.randint(0, 99)}",
            f"python {R.randint(2, 3)}.{R.randint(6, 13)}.{R.randint(0, 12)}",
            f"faust-streaming=={R.randint(0, 1)}.{R.randint(0, 20)}.{R.randint(0, 9)}rc{R.randint(1, 3)}",
            f"build 2026.{R.randint(1, 12)}.{R.randint(1, 28)}.{R.randint(100, 999)}",
        ]
    ),
    "price": lambda: R.choice(
        [
            f"${R.randint(1, 9999):,}.{R.randint(0, 99):02d}",
            f"¥{R.randint(1, 99999)}.00 元",
            f"€ {R.randint(1, 9999)},{R.randint(0, 99):02d}",
            f"total {R.randint(100, 999)} {R.randint(100, 999)}.{R.randint(10, 99)} USD",
        ]
    ),
    "ip_port_url": lambda: R.choice(
        [
            f"https://api.example.com:{R.randint(1000, 9999)}/v1/items?id={R.randint(1, 999)}",
            "postgres://db.internal:5432/orders",
            f"connect 10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(0, 255)}:{R.randint(1000, 9999)}",
            f"git@github.com:org/repo-{R.randint(1, 99)}.git",
        ]
    ),
    "code_and_words": lambda: R.choice(
        [
            "@app.route('/health') returns 200",
            "the token budget is 4096 tokens per call",
            "use password reset flow, then log in",
            "sk-learn is not a package; use scikit-learn",
            "mention @support in the channel",
            "flight UA123 from SFO to JFK, seat 14C",
            "ISBN 978-3-16-148410-0",
            "color #ff00aa, size 12px",
            "the secret to success is testing",
            "API key rotation is scheduled for Monday",
            "bearer of bad news",
            "call me maybe",
            "请使用密码重置功能后再登录",
            "航班 CA1831 北京-上海 座位 32A",
            "门牌号 1号楼3单元501",
            "共计 12 件商品，合计 ¥3,999",
        ]
    ),
    "number_like_ids": lambda: R.choice(
        [
            f"身份证格式错误：{ric()[:-1]}{'0' if ric()[-1] != '0' else '1'}",
            f"SSN field empty: 000-{R.randint(10, 99)}-{R.randint(1000, 9999)}",
            f"phone 123-456-{R.randint(1000, 9999)} is not a number",
            f"ZIP {R.randint(10000, 99999)}-{R.randint(1000, 9999)}",
            f"unit 12345678901 of {R.randint(2, 9)}",
            f"IBAN DE00 {R.randint(1000, 9999)} {R.randint(1000, 9999)} {R.randint(1000, 9999)} {R.randint(1000, 9999)} 00",
            f"port range 8000-8080, pid {R.randint(1000, 99999)}",
            f"latency p99 {R.randint(10, 999)}.{R.randint(0, 9)} ms over {R.randint(1000, 99999)} requests",
        ]
    ),
    # what coding agents read and write: patches, issue text, shell output (shapes that
    # `benchmarks/masking.py` found masked in real runs, written anew)
    "code": lambda: R.choice(
        [
            f"+    String password = {R.choice(['creds', 'pair', 'line'])}.substring("
            f'{R.choice(["creds", "pair", "line"])}.indexOf(":") + 1);',
            f"    secret = store.get(names[{R.randint(0, 9)}])",
            "user=user, password=password, namespace=namespace",
            f"nacos://10.0.0.{R.randint(1, 254)}:8848?username=&password=&namespace=public",
            f'docker run --rm -v "$PWD":/usr/src/app{R.randint(1, 9)} -w /usr/src/app maven:3',
            f"HOME=/root\nPWD=/workspace/repo-{R.randint(1, 99)}\nSHLVL=1",
            f"// {R.choice(['uses', 'expects', 'is'])} a basic "
            f"{R.choice(['authentication', 'structure', 'approach', 'utilities'])} step",
            f"https://ci.example.org/o/r/actions/runs/{R.randint(10**9, 10**10)}"
            f"/job/1{R.randint(3, 9)}{R.randint(10**8, 10**9 - 1)}",
            f"long DEADLINE = 1{R.randint(3, 9)}{R.randint(10**8, 10**9 - 1)}L;",
            f"@@ -{R.randint(100, 9999)},7 +{R.randint(100, 9999)},8 @@ class Parser {{",
            f"    String password = p...[+{R.randint(100, 2000)} chars]",
        ]
    ),
}


def main() -> None:
    lines: list[dict[str, object]] = []
    for kind, make in SECRETS.items():
        templates = SPECIAL.get(kind)
        if templates is None:
            label, label_zh, key = LABELS[kind]
            templates = [
                t.replace("{label}", label).replace("{label_zh}", label_zh).replace("{key}", key)
                for t in CONTEXTS_EN + CONTEXTS_ZH
            ]
        for template in templates:
            for _ in range(2 if kind in SPECIAL else 1):
                value = make()
                # in a JSON-looking template a key block is written with escaped newlines
                raw = value.replace("\n", "\\n") if '"' in template else value
                text = template.replace("{{", "{").replace("}}", "}").replace("{v}", raw)
                lines.append({"kind": kind, "text": text, "secrets": [raw]})
    for kind, make in LOOKALIKES.items():
        for _ in range(22):
            lines.append({"kind": f"lookalike:{kind}", "text": make(), "secrets": []})
    with OUT.open("w", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    positives = sum(1 for line in lines if line["secrets"])
    print(
        f"{OUT.name}: {len(lines)} lines, {positives} with a secret, {len(lines) - positives} look-alikes"
    )


if __name__ == "__main__":
    main()
