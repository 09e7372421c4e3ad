"""docs/API.md's argument and answer tables are the OpenAPI document's (issue 44).

The tables sit between marker comments and are rendered by `pocolobby.api_docs` from the
document `lobbies.api.openapi` generates; the prose around them is written by hand. A model
change that leaves a table behind fails here, naming the table and the command that fixes it.
"""

from __future__ import annotations

import copy
import re

import pytest

from pocolobby import api_docs


@pytest.fixture(scope="module")
def document() -> api_docs.Node:
    return api_docs.openapi_document()


def test_every_table_of_api_md_is_what_the_openapi_document_renders(document):
    text = api_docs.API_MD.read_text()
    out_of_date = api_docs.stale(document, text)
    assert out_of_date == [], (
        f"docs/API.md's tables {out_of_date} differ from the OpenAPI document; "
        f"run: {api_docs.WRITE_COMMAND}"
    )


def test_api_md_renders_the_tables_of_the_main_operations(document):
    names = {section.name for section in api_docs.sections(api_docs.API_MD.read_text())}
    assert {
        "arguments send_message",
        "answer send_message",
        "arguments GET /v1/messages",
        "arguments acknowledge_messages",
        "answer acknowledge_messages",
        "arguments save_checkpoint",
        "operations /v1/admin",
    } <= names


def test_a_changed_description_names_the_stale_table_and_writing_keeps_the_prose(document):
    text = (
        "Prose before.\n\n<!-- generated: arguments send_message -->\nold table\n"
        "<!-- end generated -->\n\nProse after.\n"
    )
    written = api_docs.rendered(document, text)
    assert written.startswith("Prose before.\n\n<!-- generated: arguments send_message -->\n")
    assert written.endswith("<!-- end generated -->\n\nProse after.\n")
    assert "| `to` | string (name rule) | required |" in written
    assert api_docs.stale(document, written) == []

    changed = copy.deepcopy(document)
    changed["components"]["schemas"]["SendMessage"]["properties"]["to"]["description"] = "Who"
    assert api_docs.stale(changed, written) == ["arguments send_message"]
    assert "| Who |" in api_docs.rendered(changed, written)


def test_a_marker_naming_no_operation_fails_by_its_name(document):
    text = "<!-- generated: arguments no_such_tool -->\n<!-- end generated -->\n"
    with pytest.raises(api_docs.UnknownSection, match="no_such_tool"):
        api_docs.stale(document, text)
    with pytest.raises(api_docs.UnknownSection, match="'errata'"):
        api_docs.stale(document, "<!-- generated: errata x -->\n<!-- end generated -->\n")


def test_the_admin_api_is_described_in_one_section():
    headings = re.findall(r"^#+ .*$", api_docs.API_MD.read_text(), re.MULTILINE)
    assert [h for h in headings if "/v1/admin" in h] == ["## Admin API (`/v1/admin`, admin token)"]


def test_the_command_line_check_exits_nonzero_and_names_the_fix(tmp_path, capsys):
    page = tmp_path / "API.md"
    page.write_text("<!-- generated: arguments set_status -->\nold\n<!-- end generated -->\n")
    assert api_docs.main(["--path", str(page)]) == 1
    assert "'arguments set_status'" in capsys.readouterr().out
    assert api_docs.main(["--path", str(page), "--write"]) == 0
    assert api_docs.main(["--path", str(page)]) == 0
    assert "| `status` |" in page.read_text()
