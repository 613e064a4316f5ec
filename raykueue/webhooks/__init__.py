"""Pure admission decisions: no I/O, no globals, nothing imported from raykueue's other floors."""
