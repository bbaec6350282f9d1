"""Example values: the committed stacks carry them so the offline preview runs as shipped; a real
deploy (`llmserve preflight`, the program on a real engine) refuses them, naming each key."""
from __future__ import annotations

import copy

import pulumi
import pytest

from settings import read_stack_config, settings_from_config, stack_file
from settings import pulumi_config
from settings.examples import documentation_cidr, example_domain, example_values


@pytest.mark.parametrize("name, example", [
    ("llm.example.com", True), ("example.org", True), ("a.b.example.net", True), ("LLM.Example.COM.", True),
    ("llm.example", True), ("llm.example.com.au", False), ("notexample.com", False), ("llm.acme-corp.io", False),
])
def test_example_domains(name, example):
    assert example_domain(name) is example


@pytest.mark.parametrize("cidr, example", [
    ("203.0.113.0/24", True), ("192.0.2.7/32", True), ("198.51.100.128/25", True),
    ("0.0.0.0/0", False), ("203.0.0.0/16", False), ("52.94.76.0/24", False), ("10.0.0.0/8", False),
])
def test_documentation_cidrs(cidr, example):
    assert documentation_cidr(cidr) is example


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_committed_stack_names_its_example_values(stack):
    found = example_values(settings_from_config(stack, read_stack_config(stack_file(stack))))
    assert {"gateway.hostedZoneId", "gateway.hostname", "apiAllowedCidrs"} <= {v.key for v in found}


def real_settings():
    raw = copy.deepcopy(read_stack_config(stack_file("prod")))
    raw["llm-serving:apiAllowedCidrs"] = ["52.94.76.0/24"]
    raw["llm-serving:gateway"] = {**raw["llm-serving:gateway"], "hostname": "llm.acme-corp.io",
                                  "hostedZoneId": "Z04517273VCLIDX9UFQFA", "acmeEmail": "platform@acme-corp.io"}
    return settings_from_config("prod", raw)


def test_a_stack_with_real_values_has_none():
    assert example_values(real_settings()) == []


def test_the_program_refuses_them_on_a_real_engine(monkeypatch):
    monkeypatch.setattr(pulumi_config, "on_real_engine", lambda: True)
    settings = settings_from_config("prod", read_stack_config(stack_file("prod")))
    with pytest.raises(pulumi.RunError) as exc:
        pulumi_config.refuse_example_values(settings)
    lines = str(exc.value).splitlines()
    assert lines[0] == "example values in the stack config; replace each before a real deploy:"
    assert [line.split(":")[1] for line in lines[1:]] == [
        "gateway.hostedZoneId", "gateway.hostname", "gateway.acmeEmail", "apiAllowedCidrs"]
    pulumi_config.refuse_example_values(real_settings())       # nothing to refuse


def test_the_program_itself_stops_on_them_before_registering_anything(monkeypatch):
    """__main__.py calls the refusal: on a real engine the committed prod stack never reaches AWS."""
    from offline.engine import run_program

    monkeypatch.setattr(pulumi_config, "on_real_engine", lambda: True)
    with pytest.raises(pulumi.RunError) as exc:
        run_program("prod", read_stack_config(stack_file("prod")))
    assert str(exc.value).startswith("example values in the stack config; replace each before a real deploy:\n"
                                     "llm-serving:gateway.hostedZoneId: Z0EXAMPLE00000000000 is an example value")


def test_under_the_offline_engine_they_are_listed_not_refused(recorded):
    from offline.preview import preview_stack

    assert recorded("prod").resources        # the program ran to the end on the committed stack
    result = preview_stack("prod")
    assert [line.split(":")[1] for line in result.as_dict()["exampleValues"]] == [
        "gateway.hostedZoneId", "gateway.hostname", "gateway.acmeEmail", "apiAllowedCidrs"]


def test_under_mocks_the_engine_is_not_real(recorded):
    recorded("dev")
    assert pulumi_config.on_real_engine() is False
