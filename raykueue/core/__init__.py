"""The neutral domain core: the contract's names, tolerant object readers, pod
identity and role, JSON-pointer escaping and time formats. Pure; imports
nothing of raykueue's, so the admission path and the controller both read it
without borrowing from each other."""
