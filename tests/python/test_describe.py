"""The tool description and agent instructions: exactly the C library's."""
import json
import subprocess

import airlock
from conftest import AIRLOCK


def test_description_is_the_c_librarys(tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.csv").write_text("1\n")
    sb = airlock.Sandbox(workspace=tmp_path / "w", allowed_domains=[("api.example.com", "GET")])
    cli = json.loads(subprocess.run([AIRLOCK, "describe", "--json", "-w", str(tmp_path / "w"),
                                     "-a", "api.example.com=GET"],
                                    capture_output=True, text=True, check=True).stdout)
    d = sb.describe()
    for k in ("name", "description", "input_schema", "approval_mode"):
        assert d[k] == cli[k], k
    # The instructions are the library's, but for their first sentence:
    # `airlock describe` prints the MCP server's, which names the tools the
    # server lists; the package's tool definition is execute_code alone.
    ours, served = d["instructions"].split("\n", 1), cli["instructions"].split("\n", 1)
    assert ours[1] == served[1]
    assert ours[0].startswith("This server offers one tool, execute_code"), ours[0]
    assert served[0].startswith("This server offers 4 tools: execute_code"), served[0]
    assert "packages" in d
    td = sb.tool_definition()
    assert td["name"] == "execute_code"
    assert sb.build_instructions() == td["instructions"]
    # What the agent-loop recipe hands the model: describe()'s texts, with
    # the notable packages of the running sandbox.
    assert td == {k: d[k] for k in ("name", "description", "input_schema", "instructions",
                                    "approval_mode")}
    assert "Notable packages" in d["description"]
    assert td["description"].startswith(sb.description.split("\n\n")[0])
    sb.close()


def test_description_names_python_tools():
    def lookup_order(order_id: str) -> dict:
        """Looks an order up by its id."""
        return {}

    sb = airlock.Sandbox(tools=[lookup_order])
    assert "lookup_order" in sb.description
    assert "Looks an order up by its id." in sb.description
    sb.remove_tool("lookup_order")
    assert "lookup_order" not in sb.description
    sb.close()
