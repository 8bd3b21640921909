# `cmake --install`: the libraries, the public headers, the `modelmem` tool, the preload and CUDA
# libraries, a CMake package (find_package(modelmem) -> modelmem::modelmem, modelmem::core) and a
# pkg-config file (modelmem.pc). Included last by the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MODELMEM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/modelmem)

set_target_properties(modelmem_core PROPERTIES EXPORT_NAME core)
target_include_directories(modelmem_core PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set(MODELMEM_EXPORTED modelmem_core)
if(TARGET modelmem_ext AND NOT MODELMEM_MINIMAL)
  set_target_properties(modelmem_ext PROPERTIES EXPORT_NAME ext)
  set_target_properties(modelmem PROPERTIES EXPORT_NAME modelmem)
  list(APPEND MODELMEM_EXPORTED modelmem_ext modelmem)
endif()

install(TARGETS ${MODELMEM_EXPORTED} EXPORT modelmemTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/modelmem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The tool and the libraries a framework loads (LD_PRELOAD, pluggable allocators).
foreach(target modelmem_cli modelmem_preload modelmem_cuda_alloc modelmem_npu_alloc)
  if(TARGET ${target})
    install(TARGETS ${target}
      RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endforeach()

install(EXPORT modelmemTargets NAMESPACE modelmem:: DESTINATION ${MODELMEM_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/modelmemConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/modelmemConfig.cmake INSTALL_DESTINATION ${MODELMEM_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/modelmemConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/modelmemConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/modelmemConfigVersion.cmake DESTINATION ${MODELMEM_CMAKE_DIR})

# pkg-config: the static libraries in link order, then what they need.
if(MODELMEM_MINIMAL)
  set(MODELMEM_PC_LIBS "-lmodelmem_core")
  set(MODELMEM_PC_REQUIRES "")
else()
  set(MODELMEM_PC_LIBS "-lmodelmem_ext -lmodelmem_core -lonnx -lonnx_proto -lyaml")
  set(MODELMEM_PC_REQUIRES "fmt protobuf nlohmann_json")
endif()
# Relocatable: the prefix is found from where the .pc file lies (${pcfiledir}), so a tree installed
# with `cmake --install --prefix DIR` works wherever DIR is.
file(RELATIVE_PATH MODELMEM_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/modelmem.pc.in ${CMAKE_CURRENT_BINARY_DIR}/modelmem.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/modelmem.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
