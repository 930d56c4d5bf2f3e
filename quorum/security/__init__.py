"""Who is asking, and may they: TLS and SASL authentication, and ACL authorization (issue 18)."""
