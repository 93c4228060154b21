"""A minimal hand-written agent loop with the airlock package.

The model is any function that takes the message list and the tool
definition and returns either {"code": "..."} (it wants to run code) or
{"answer": "..."} (it is done). Plug in your provider's client there; the
loop, the sandbox and the tools are the same whatever the model is.
tests/python/test_agent_loop.py drives this file with a scripted model.
"""
import airlock


def lookup_order(order_id: str) -> dict:
    """Looks an order up by its id.

    Args:
        order_id: The order's id, such as "A-17".
    """
    return {"order_id": order_id, "status": "shipped", "items": 3}


def agent(task: str, model, *, workspace=None, max_steps: int = 8) -> str:
    with airlock.Sandbox(workspace=workspace, tools=[lookup_order],
                         limits={"timeout": 30}) as sb:
        tool = sb.tool_definition()  # name, description, input_schema, instructions
        messages = [{"role": "system", "content": tool["instructions"]},
                    {"role": "user", "content": task}]
        for _ in range(max_steps):
            reply = model(messages, tool)
            if "answer" in reply:
                return reply["answer"]
            result = sb.run(reply["code"])
            # What the model reads back: the result's contents in order, the
            # files named (their bytes are for the host to keep or show).
            seen = []
            for c in result.contents:
                if c["type"] == "text":
                    seen.append(c["text"])
                elif c["type"] == "data":
                    seen.append(f"[file {c['path']} ({c['media_type']}, {len(c['data'])} bytes)]")
                else:
                    seen.append(f"error: {c['message']}\n{c['details']}")
            messages.append({"role": "assistant", "content": reply["code"]})
            messages.append({"role": "tool", "content": "\n".join(seen)})
        return "no answer within the step limit"
