"""The README's hand-written agent loop (python/examples/agent_loop.py),
driven by a scripted model."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "examples"))
import agent_loop  # noqa: E402


def test_agent_loop_with_a_scripted_model():
    seen = []

    def model(messages, tool):
        assert tool["name"] == "execute_code" and "lookup_order" in tool["description"]
        if len(messages) == 2:
            return {"code": "o = call_tool('lookup_order', order_id='A-17')\n"
                            "print(o['status'])\nopen('/output/o.txt','w').write(str(o))"}
        if len(messages) == 4:
            seen.append(messages[-1]["content"])
            return {"code": "call_tool('lookup_order')"}
        seen.append(messages[-1]["content"])
        return {"answer": "The order has shipped."}

    assert agent_loop.agent("Where is order A-17?", model) == "The order has shipped."
    assert seen[0].startswith("shipped\n")
    assert "[file /output/o.txt (text/plain," in seen[0]
    assert seen[1].startswith("error: ") and ("missing" in seen[1] or "required" in seen[1])
