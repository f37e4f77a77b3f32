"""Host side: renders layouts and drives Docker. Never imports torch (a test checks it)."""
