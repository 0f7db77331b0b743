"""A server whose tools return JSON without declaring an outputSchema (Python SDK 1.x FastMCP), for the
learned-shape tests.

Tools: invoices(customer) returns records full of personal data as values (names, emails, phone numbers
in strings) and as keys (a dict keyed by email addresses and one keyed by ids); `customer` changes the
values and which optional keys appear, so further calls check a shape against new data. wrong_total()
declares an outputSchema and breaks it. All are read-only by their annotations; invoices has a
default argument, so `tools discover` can build its call.
"""

import json

from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, TextContent, ToolAnnotations

server = FastMCP("records")
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False)

PEOPLE = [
    ("Margarethe Oyelaran-Whitcombe", "margarethe.oyelaran@example.org", "+1 415 555 0172"),
    ("Thaddeus Kowalczyk-Ferreira", "t.kowalczyk.ferreira@example.net", "+44 20 7946 0958"),
    ("Ingrid Sørensen-Abernathy", "ingrid.abernathy@example.com", "+49 30 901820"),
]


@server.tool(structured_output=False, annotations=READ_ONLY)
def invoices(customer: int = 0) -> str:
    """Lists a customer's invoices with their totals, contacts and line items."""
    name, email, phone = PEOPLE[customer % len(PEOPLE)]
    records = [
        {
            "invoice_id": f"INV-{customer}-{i}",
            "issued_at": f"2026-0{i + 1}-1{customer % 9}T10:00:00Z",
            "amount_due": 100.5 * (i + 1),
            "paid": i % 2 == 0,
            "billing_contact": f"{name} <{email}>, phone {phone}",
            "lines": [{"sku": f"SKU{customer}{j}", "quantity": j + 1} for j in range(i + 1)],
            **({"discount_code": f"SPRING{customer}"} if (customer + i) % 2 else {}),
        }
        for i in range(2 + customer % 2)
    ]
    return json.dumps({
        "customer_name": name,
        "invoices": records,
        # Keys that are data: emails and ids.
        "contacts_by_email": {email: {"role": "billing", "since": "2024-01-01"}},
        "balances_by_account": {f"{40000000 + customer}": {"balance": 12.5 * customer}},
        "portal": f"https://billing.example.com/c/{customer}",
    })


@server.tool(structured_output=False, annotations=READ_ONLY)
def wrong_total() -> CallToolResult:
    """Declares its total as a string and returns it as a number."""
    return CallToolResult(content=[TextContent(type="text", text='{"total": 3}')], structuredContent={"total": 3})


# The declared schema is listed as the server says it, and the result is not checked against it here
# (a handler's CallToolResult is passed on as it is): the breach reaches the client.
_list = server.list_tools


async def _listed():
    tools = await _list()
    for tool in tools:
        if tool.name == "wrong_total":
            tool.outputSchema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "string"}}}
    return tools


server._mcp_server.list_tools()(_listed)


if __name__ == "__main__":
    server.run()
