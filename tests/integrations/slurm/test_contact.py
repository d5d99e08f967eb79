"""User name → e-mail: mapping file, GECOS, domain suffix."""

from __future__ import annotations

import os
import subprocess

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.slurm.contact import ContactResolver, gecos_email, parse_mapping


@pytest.mark.parametrize(
    ("text", "mapping"),
    [
        (
            "alice: alice@uni.edu\nbob: b.smith@uni.edu\n",
            {"alice": "alice@uni.edu", "bob": "b.smith@uni.edu"},
        ),
        (
            "# users\nalice alice@uni.edu\nbob,b@uni.edu  # lab\n\n",
            {"alice": "alice@uni.edu", "bob": "b@uni.edu"},
        ),
        ("", {}),
    ],
)
def test_parse_mapping(text, mapping):
    assert parse_mapping(text) == mapping


@pytest.mark.parametrize(
    ("line", "email"),
    [
        ("alice:x:1001:1001:Alice Liddell,Room 1,,alice@uni.edu:/home/alice:/bin/bash", "alice@uni.edu"),
        ("bob:x:1002:1002:Bob <bob@lab.org>:/home/bob:/bin/bash", "bob@lab.org"),
        ("carol:x:1003:1003:<carol@lab.org>:/home/carol:/bin/bash", "carol@lab.org"),
        ("root:x:0:0:root:/root:/bin/bash", None),
        ("eve:x:1:1:Eve,@,x@y:/h:/s", None),
        ("broken", None),
    ],
)
def test_gecos_email(line, email):
    assert gecos_email(line) == email


def test_rules_in_order(tmp_path):
    mapping = tmp_path / "contacts.yaml"
    mapping.write_text("alice: alice@mapped.org\n")
    calls = []

    def getent(user):
        calls.append(user)
        return {"bob": "bob:x:1:1:Bob,,,bob@gecos.org:/h:/s"}.get(user)

    resolve = ContactResolver(domain="@uni.edu", map_file=mapping, gecos=True, getent=getent)
    assert resolve("alice") == "alice@mapped.org"
    assert resolve("bob") == "bob@gecos.org"
    assert resolve("carol") == "carol@uni.edu"
    assert resolve("bob") == "bob@gecos.org"
    assert calls == ["bob", "carol"], "one getent per user"
    assert resolve("") is None


def test_mapping_file_is_reread_when_it_changes(tmp_path):
    mapping = tmp_path / "contacts.txt"
    mapping.write_text("alice old@x.org\n")
    resolve = ContactResolver(map_file=mapping)
    assert resolve("alice") == "old@x.org"
    mapping.write_text("alice new@x.org\n")
    os.utime(mapping, (1, 1))
    assert resolve("alice") == "new@x.org"


def test_no_rule_no_address_and_getent_failure_is_not_cached():
    fail = [True]

    def getent(user):
        if fail[0]:
            raise SourceError("getent timed out")
        return "dan:x:1:1:dan@lab.org:/h:/s"

    assert ContactResolver()("alice") is None
    resolve = ContactResolver(gecos=True, getent=getent)
    assert resolve("dan") is None
    fail[0] = False
    assert resolve("dan") == "dan@lab.org"


def test_real_getent_for_root():
    from gpusteward.integrations.slurm import SlurmClient, SlurmRunner

    expected = subprocess.run(["getent", "passwd", "root"], capture_output=True, text=True, check=True).stdout
    client = SlurmClient(SlurmRunner())
    assert client.passwd("root") == expected.strip()
    resolve = ContactResolver(domain="example.org", gecos=True, getent=client.passwd)
    # root's GECOS is just "root": the domain rule answers.
    assert resolve("root") == "root@example.org"
