# Sanitizer presets: 'address' turns on ASan + UBSan, 'thread' turns on TSan.
if(SINKGRAPH_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(SINKGRAPH_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT SINKGRAPH_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SINKGRAPH_SANITIZE must be '', 'address' or 'thread', got '${SINKGRAPH_SANITIZE}'")
endif()
