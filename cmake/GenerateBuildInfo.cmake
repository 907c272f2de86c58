# Run at build time (cmake -P) so the git revision and dirty flag are those of the tree that was
# built, not of the last configure. Rewrites the output only when its content changes, so an
# unchanged tree does not relink anything.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse HEAD OUTPUT_VARIABLE rev
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(rev "")
endif()
set(dirty 0)
if(rev)
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE status ERROR_QUIET)
  if(status)
    set(dirty 1)
  endif()
endif()
configure_file("${INPUT}" "${OUTPUT}.tmp" @ONLY)
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
