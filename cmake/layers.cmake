# The layer rule of docs/architecture.md, enforced by the build: every layer of src/ is an object
# library (modelmem_layer_<name>) that sees only its own headers and those of the layers its
# rule allows, linked by that rule. An include of a layer above fails to compile
# ("modelmem/alloc/allocator.hpp: No such file or directory"), which
# tests/architecture/CMakeLists.txt proves with a scratch file. modelmem_core and modelmem_ext
# are the static libraries made of these objects, with the whole include/ for their users.
#
# Each layer's include roots live in the build tree, as symbolic links:
#   layers/<name>/include/modelmem/<folder> -> include/modelmem/<folder>   (public headers)
#   layers/<name>/src/<folder>              -> src/<folder>                (private headers)
set(MODELMEM_LAYER_ROOT ${PROJECT_BINARY_DIR}/layers)
set(MODELMEM_LAYER_TARGETS "" CACHE INTERNAL "the layers' object libraries")

function(modelmem_link_once target link)
  get_filename_component(dir ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  if(NOT IS_SYMLINK ${link})
    file(CREATE_LINK ${target} ${link} SYMBOLIC)
  endif()
endfunction()

# modelmem_layer(NAME SOURCES glob... [EXCLUDE file...] [HEADERS folder-or-header...]
#                [PRIVATE folder...] [DEPS layer...] [LIBS target...])
# HEADERS: what of include/modelmem/ is the layer's own (default: the folder NAME);
# PRIVATE: its folders of src/ (default: the folder NAME when it exists); DEPS: the layers below
# it that its rule allows (their headers come with them); LIBS: other usage requirements.
function(modelmem_layer name)
  cmake_parse_arguments(arg "" "" "SOURCES;EXCLUDE;HEADERS;PRIVATE;DEPS;LIBS" ${ARGN})
  # A keyword given without values (HEADERS PRIVATE ...) means none; an absent one the default.
  if(NOT DEFINED arg_HEADERS AND NOT "HEADERS" IN_LIST arg_KEYWORDS_MISSING_VALUES)
    set(arg_HEADERS ${name})
  endif()
  if(NOT DEFINED arg_PRIVATE AND NOT "PRIVATE" IN_LIST arg_KEYWORDS_MISSING_VALUES
     AND IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/${name})
    set(arg_PRIVATE ${name})
  endif()
  set(root ${MODELMEM_LAYER_ROOT}/${name})
  foreach(h IN LISTS arg_HEADERS)
    modelmem_link_once(${PROJECT_SOURCE_DIR}/include/modelmem/${h} ${root}/include/modelmem/${h})
  endforeach()
  foreach(p IN LISTS arg_PRIVATE)
    modelmem_link_once(${PROJECT_SOURCE_DIR}/src/${p} ${root}/src/${p})
  endforeach()
  set(sources "")
  foreach(g IN LISTS arg_SOURCES)
    file(GLOB found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${g})
    list(APPEND sources ${found})
  endforeach()
  foreach(x IN LISTS arg_EXCLUDE)
    list(REMOVE_ITEM sources ${PROJECT_SOURCE_DIR}/${x})
  endforeach()
  set(target modelmem_layer_${name})
  add_library(${target} OBJECT ${sources})
  target_include_directories(${target} PUBLIC ${root}/include)
  if(arg_PRIVATE)
    target_include_directories(${target} PRIVATE ${root}/src)
  endif()
  foreach(d IN LISTS arg_DEPS)
    target_link_libraries(${target} PUBLIC modelmem_layer_${d})
  endforeach()
  if(arg_LIBS)
    target_link_libraries(${target} PUBLIC ${arg_LIBS})
  endif()
  set(MODELMEM_LAYER_TARGETS ${MODELMEM_LAYER_TARGETS} ${target} CACHE INTERNAL "")
endfunction()

# A static library made of layers' objects.
function(modelmem_layers_library library)
  set(objects "")
  foreach(layer IN LISTS ARGN)
    list(APPEND objects $<TARGET_OBJECTS:modelmem_layer_${layer}>)
  endforeach()
  add_library(${library} STATIC ${objects})
endfunction()
